/*
 * Makes an unmodified program a DPDK application's process: a constructor starts DPDK's
 * EAL, with the arguments of WC_HOST_EAL (separated by spaces), before the program's main,
 * as an SPDK target starts its EAL before its RDMA transport opens a verbs device.
 * Preloaded (LD_PRELOAD) into an rdma-core program run through scripts/with-warpcore, it
 * leaves the drop-in libibverbs an EAL it did not start: the drop-in must join it
 * (EalBuilder::init_or_join) instead of failing to start its own
 * (scripts/test-rdma-compat.sh, "rping in DPDK applications").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>

__attribute__((constructor)) static void dpdk_host_start_eal(void)
{
	const char *env = getenv("WC_HOST_EAL");
	char *argv[64];
	int argc = 0;
	char *copy, *tok, *save = NULL;

	if (env == NULL) {
		fprintf(stderr, "dpdk_host_preload: WC_HOST_EAL is not set\n");
		exit(97);
	}
	copy = strdup(env);
	if (copy == NULL)
		exit(97);
	argv[argc++] = "dpdk-host";
	for (tok = strtok_r(copy, " ", &save); tok != NULL && argc < 63;
	     tok = strtok_r(NULL, " ", &save))
		argv[argc++] = tok;
	argv[argc] = NULL;
	if (rte_eal_init(argc, argv) < 0) {
		fprintf(stderr, "dpdk_host_preload: rte_eal_init failed: %s\n",
			rte_strerror(rte_errno));
		exit(98);
	}
	fprintf(stderr, "dpdk_host_preload: the application started the EAL (%u lcore(s))\n",
		rte_lcore_count());
}
