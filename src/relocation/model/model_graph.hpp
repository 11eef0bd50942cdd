// The foreign-key graph of the application's tables as relocation sees it:
// pure C++ (no PostgreSQL types), so that the unit tests reach it.  Nodes
// are indexes 0..nodes-1 (the caller sorts them by table key, so that every
// tie is broken the same way); an edge runs from the table that holds the
// reference (child) to the table it refers to (parent).  member[i] says
// whether node i takes part (the tables of the scope being exported or
// checked); edges with an end outside are ignored.
//
// Called between PostgreSQL calls, never around them: the containers inside
// are freed by their destructors, which a longjmp would skip.
#pragma once

namespace pgoutbox::relocation {

struct GraphEdge {
    int child;
    int parent;
    bool nullable; // the referencing column may be NULL
};

// The order an export writes its tables in, parents first.  A cycle
// (self-references included) is broken at its nullable edges: every
// nullable edge inside a strongly connected component is deferred (the
// import writes NULL there, then the value in a later recorded step, as
// Sentry's import does).  Writes the members' indexes to order_out and
// deferred_out[e] for each edge; returns -1, or a node of a cycle of NOT
// NULL edges, which no order can satisfy.
int plan_export_order(int nodes, const GraphEdge *edges, int edge_count, const bool *member,
                      int *order_out, int *order_count, bool *deferred_out);

// reaches[i]: a path of edges leads from member i to root; reaches_not_null:
// one made of NOT NULL edges only (a row can belong to no root otherwise).
void reach_root(int nodes, const GraphEdge *edges, int edge_count, const bool *member, int root,
                bool *reaches, bool *reaches_not_null);

// in_cycle[i]: member i is on a cycle of NOT NULL edges (a NOT NULL
// self-reference included).
void not_null_cycles(int nodes, const GraphEdge *edges, int edge_count, const bool *member,
                     bool *in_cycle);

} // namespace pgoutbox::relocation
