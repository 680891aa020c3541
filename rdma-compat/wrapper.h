/* The public rdma-core headers whose layouts the drop-in libraries implement. */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
