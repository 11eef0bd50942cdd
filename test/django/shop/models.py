from django.db import models


class Organization(models.Model):
    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=64)


class Member(models.Model):
    # organization_id: bigint NOT NULL, pg_outbox's shard_column.
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    email = models.CharField(max_length=254)
    display_name = models.CharField(max_length=64)
    is_active = models.BooleanField(default=True)

    class Meta:
        indexes = [
            models.Index(fields=["organization", "email"], name="shop_member_org_email"),
            models.Index(fields=["organization", "is_active"], name="shop_member_org_active"),
        ]


class Team(models.Model):
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE)
    name = models.CharField(max_length=64)
