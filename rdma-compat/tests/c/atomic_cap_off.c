/*
 * Contract: ibv_query_device(3)'s atomic_cap says whether the device does atomic
 * operations; IBV_ATOMIC_NONE is "atomic operations are not supported", as siw reports
 * (siw_query_device: atomic_cap 0) and what applications test before they post one
 * (libfabric's verbs provider and UCX leave out atomics on such a device, perftest's
 * ib_atomic_bw refuses to run). With WARPCORE_RFC7306=off (towards siw, which has no
 * RFC 7306) every atomic posted is refused (EOPNOTSUPP, nothing sent), so the device
 * must say IBV_ATOMIC_NONE; before, it said IBV_ATOMIC_HCA whatever the setting.
 *   - WARPCORE_RFC7306=off (set here, before the first verbs call): IBV_ATOMIC_NONE in
 *     ibv_query_device and in ibv_query_device_ex's orig_attr;
 *   - the RDMA Read limits stay as they are (Reads need no RFC 7306).
 * One process, no peer:
 *   atomic_cap_off
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static const char *contract_name = "atomic_cap_off";
#include "contract.h"

int main(void)
{
	/* Read when the engine starts (the first verbs call). */
	if (setenv("WARPCORE_RFC7306", "off", 1))
		DIE("setenv: %s", strerror(errno));
	struct ibv_context *ctx = contract_open_device();
	struct ibv_device_attr da;
	int r = ibv_query_device(ctx, &da);
	EXPECT(r == 0 && da.atomic_cap == IBV_ATOMIC_NONE,
	       "ibv_query_device(3) with RFC 7306 off: atomic_cap IBV_ATOMIC_NONE (got %d, atomic_cap %d)", r,
	       (int)da.atomic_cap);
	EXPECT(r == 0 && da.max_qp_rd_atom > 0 && da.max_qp_init_rd_atom > 0,
	       "ibv_query_device(3) with RFC 7306 off: RDMA Reads still offered (max_qp_rd_atom %d, "
	       "max_qp_init_rd_atom %d)",
	       da.max_qp_rd_atom, da.max_qp_init_rd_atom);
	struct ibv_device_attr_ex dx;
	memset(&dx, 0, sizeof dx);
	r = ibv_query_device_ex(ctx, NULL, &dx);
	EXPECT(r == 0 && dx.orig_attr.atomic_cap == IBV_ATOMIC_NONE,
	       "ibv_query_device_ex(3) with RFC 7306 off: orig_attr.atomic_cap IBV_ATOMIC_NONE (got %d, %d)", r,
	       (int)dx.orig_attr.atomic_cap);
	return contract_end();
}
