#include "link/server_options.hpp"

extern "C" {
#include "commands/defrem.h"
#include "foreign/foreign.h"
#include "libpq-fe.h"
#include "miscadmin.h"
#include "utils/syscache.h"
}

namespace pgoutbox {

const char *connection_options(LinkTarget *target) {
    ForeignServer *server = GetForeignServerByName(target->server, true);
    if (server == nullptr)
        return psprintf("server %s does not exist", target->server);
    // Whoever can change the server's host receives the mapping's password
    // when the worker connects (as with outbox.redis_host).
    if (!superuser_arg(server->owner))
        return psprintf("server %s of a link must be owned by a superuser: its owner could "
                        "point it elsewhere and receive the worker's credentials",
                        target->server);
    if (!SearchSysCacheExists2(USERMAPPINGUSERSERVER, ObjectIdGetDatum(GetUserId()),
                               ObjectIdGetDatum(server->serverid)) &&
        !SearchSysCacheExists2(USERMAPPINGUSERSERVER, ObjectIdGetDatum(InvalidOid),
                               ObjectIdGetDatum(server->serverid)))
        return psprintf("no user mapping for role %s on server %s",
                        GetUserNameFromId(GetUserId(), false), target->server);
    UserMapping *mapping = GetUserMapping(GetUserId(), server->serverid);
    PQconninfoOption *defaults = PQconndefaults();
    int n = list_length(server->options) + list_length(mapping->options) + 2;
    auto **keywords = (const char **)palloc0(sizeof(char *) * (n + 1));
    auto **values = (const char **)palloc0(sizeof(char *) * (n + 1));
    int k = 0;
    List *lists[2] = {server->options, mapping->options};
    for (List *options : lists) {
        ListCell *cell;
        foreach (cell, options) {
            DefElem *option = (DefElem *)lfirst(cell);
            bool libpq = false;
            for (PQconninfoOption *o = defaults; o != nullptr && o->keyword != nullptr; o++)
                libpq = libpq || strcmp(o->keyword, option->defname) == 0;
            if (!libpq)
                continue;
            keywords[k] = pstrdup(option->defname);
            values[k] = pstrdup(defGetString(option));
            k++;
        }
    }
    PQconninfoFree(defaults);
    keywords[k] = "fallback_application_name";
    values[k++] = "pg_outbox link";
    keywords[k] = nullptr;
    target->keywords = keywords;
    target->values = values;
    // The server's name and every option: a connection made with other
    // ones (the cell's server changed, its options, the user mapping) is
    // dropped and made anew at the next round.
    StringInfoData conninfo;
    initStringInfo(&conninfo);
    appendStringInfoString(&conninfo, target->server);
    for (int i = 0; i < k; i++)
        appendStringInfo(&conninfo, "\x01%s=%s", keywords[i], values[i]);
    target->conninfo = conninfo.data;
    return nullptr;
}

} // namespace pgoutbox
