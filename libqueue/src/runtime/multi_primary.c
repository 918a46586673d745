/* A subscription on one node of a multi-primary cluster (MariaDB Galera).
 *
 * Every node takes writes. A transaction's row locks and its GET_LOCK names
 * live on the node that took them and are not replicated; what the cluster
 * orders is committed writes: at commit each node's write set is certified
 * against those committed meanwhile, and of two that wrote the same row the
 * later fails (error 1213, LQ_CONTENTION). So a claim holds across nodes
 * only when it commits a write of the row before the handler runs: the lease
 * form's stamp. The row lock form runs the handler under a lock another
 * node can take too, the advisory form under a node-local GET_LOCK; the
 * queue-wide limits count under a node-local lock of the queue (GET_LOCK,
 * or the row locks of the holds table), and FIFO groups
 * keep their order by locking the group's rows and reading the leases of
 * rows they do not write. Each is refused here, naming what holds. */
#include "runtime/runtime.h"

int lq__multi_primary_check(const lq_subscription *s, lq__conn *conn) {
    const lq__dialect *d = s->broker->dialect;
    if (!d->node_local_locks || !d->node_local_locks(conn)) return LQ_OK;
    char label[256];
    lq__table_label(s->table, label, sizeof label);
    const char *why = NULL;
    if (s->form == LQ_FORM_ROW_LOCK)
        why = "the row lock form: another node can lock the same row, and both handlers would "
              "run (one settlement then fails at commit); use the lease form, whose claim "
              "commits a lease that the cluster certifies";
    else if (s->form == LQ_FORM_ADVISORY)
        why = "the advisory form: GET_LOCK is local to each node, so two nodes can take the "
              "same key; use the lease form, whose claim commits a lease that the cluster "
              "certifies";
    else if (s->concurrency || s->rate_limit || s->partition_concurrency || s->key_rate_limit)
        why = "concurrency, rate_limit, partition_concurrency and partition_rate_limit: they "
              "count under a lock of the queue (GET_LOCK, or row locks of the holds table), "
              "which holds on one node only, so each node "
              "would grant the whole room; use worker_concurrency (and "
              "partition_worker_concurrency) per worker, which hold on any node";
    else if (s->table->fifo)
        why = "FIFO groups: the group's order is kept by locking its rows and reading the "
              "leases of rows a claim does not write, neither of which the cluster certifies; "
              "on a cluster, use a table without groups";
    if (!why) return LQ_OK;
    return lq__error(LQ_MISUSE, "table %s: the server is a node of a Galera cluster, where row "
                                "locks and GET_LOCK hold on one node only; refused: %s",
                     label, why);
}
