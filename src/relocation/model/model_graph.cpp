#include "relocation/model/model_graph.hpp"

#include <functional>
#include <queue>
#include <vector>

namespace pgoutbox::relocation {

namespace {

bool inside(const GraphEdge &e, const bool *member) {
    return member[e.child] && member[e.parent];
}

// Tarjan's strongly connected components over the members' edges that keep
// (keep[e]); component[i] for each member, -1 for the others.
std::vector<int> components(int nodes, const GraphEdge *edges, int edge_count, const bool *member,
                            const std::function<bool(int)> &keep) {
    std::vector<std::vector<int>> out(nodes);
    for (int e = 0; e < edge_count; e++)
        if (inside(edges[e], member) && keep(e))
            out[edges[e].child].push_back(edges[e].parent);
    std::vector<int> index(nodes, -1), low(nodes, 0), component(nodes, -1), stack;
    std::vector<bool> on_stack(nodes, false);
    int next_index = 0, next_component = 0;
    // Iterative: a chain of thousands of tables must not exhaust the stack.
    for (int start = 0; start < nodes; start++) {
        if (!member[start] || index[start] >= 0)
            continue;
        std::vector<std::pair<int, size_t>> path{{start, 0}};
        index[start] = low[start] = next_index++;
        stack.push_back(start);
        on_stack[start] = true;
        while (!path.empty()) {
            auto &[node, next_edge] = path.back();
            if (next_edge < out[node].size()) {
                int to = out[node][next_edge++];
                if (index[to] < 0) {
                    index[to] = low[to] = next_index++;
                    stack.push_back(to);
                    on_stack[to] = true;
                    path.push_back({to, 0});
                } else if (on_stack[to]) {
                    low[node] = std::min(low[node], index[to]);
                }
                continue;
            }
            if (low[node] == index[node]) {
                int top;
                do {
                    top = stack.back();
                    stack.pop_back();
                    on_stack[top] = false;
                    component[top] = next_component;
                } while (top != node);
                next_component++;
            }
            int finished = node;
            path.pop_back();
            if (!path.empty())
                low[path.back().first] = std::min(low[path.back().first], low[finished]);
        }
    }
    return component;
}

} // namespace

int plan_export_order(int nodes, const GraphEdge *edges, int edge_count, const bool *member,
                      int *order_out, int *order_count, bool *deferred_out) {
    std::vector<int> component =
        components(nodes, edges, edge_count, member, [](int) { return true; });
    std::vector<int> waiting(nodes, 0); // parents not yet written
    std::vector<std::vector<int>> children(nodes);
    for (int e = 0; e < edge_count; e++) {
        const GraphEdge &edge = edges[e];
        deferred_out[e] = inside(edge, member) && edge.nullable &&
                          component[edge.child] == component[edge.parent];
        if (!inside(edge, member) || deferred_out[e])
            continue;
        waiting[edge.child]++;
        children[edge.parent].push_back(edge.child);
    }
    // Kahn's algorithm, smallest index first among the ready ones.
    std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
    int members = 0;
    for (int i = 0; i < nodes; i++)
        if (member[i]) {
            members++;
            if (waiting[i] == 0)
                ready.push(i);
        }
    *order_count = 0;
    while (!ready.empty()) {
        int node = ready.top();
        ready.pop();
        order_out[(*order_count)++] = node;
        for (int child : children[node])
            if (--waiting[child] == 0)
                ready.push(child);
    }
    if (*order_count == members)
        return -1;
    for (int i = 0; i < nodes; i++)
        if (member[i] && waiting[i] > 0)
            return i;
    return -1; // not reached: a member left out waits for a parent
}

void reach_root(int nodes, const GraphEdge *edges, int edge_count, const bool *member, int root,
                bool *reaches, bool *reaches_not_null) {
    for (int pass = 0; pass < 2; pass++) {
        bool not_null_only = pass == 1;
        bool *seen = not_null_only ? reaches_not_null : reaches;
        for (int i = 0; i < nodes; i++)
            seen[i] = false;
        if (root < 0 || root >= nodes || !member[root])
            continue;
        std::vector<std::vector<int>> referrers(nodes);
        for (int e = 0; e < edge_count; e++)
            if (inside(edges[e], member) && !(not_null_only && edges[e].nullable))
                referrers[edges[e].parent].push_back(edges[e].child);
        std::vector<int> todo{root};
        seen[root] = true;
        while (!todo.empty()) {
            int node = todo.back();
            todo.pop_back();
            for (int child : referrers[node])
                if (!seen[child]) {
                    seen[child] = true;
                    todo.push_back(child);
                }
        }
    }
}

void not_null_cycles(int nodes, const GraphEdge *edges, int edge_count, const bool *member,
                     bool *in_cycle) {
    auto not_null = [edges](int e) { return !edges[e].nullable; };
    std::vector<int> component = components(nodes, edges, edge_count, member, not_null);
    std::vector<int> size(nodes, 0);
    for (int i = 0; i < nodes; i++) {
        in_cycle[i] = false;
        if (component[i] >= 0)
            size[component[i]]++;
    }
    for (int i = 0; i < nodes; i++)
        if (component[i] >= 0 && size[component[i]] > 1)
            in_cycle[i] = true;
    for (int e = 0; e < edge_count; e++)
        if (inside(edges[e], member) && not_null(e) && edges[e].child == edges[e].parent)
            in_cycle[edges[e].child] = true;
}

} // namespace pgoutbox::relocation
