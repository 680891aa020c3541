/*
 * Contract: the GID an iWARP device reports. The kernel's iWARP providers put the port's
 * MAC address in the first six octets of their one GID and zeroes after it (siw_query_gid,
 * drivers/infiniband/sw/siw/siw_verbs.c: "subnet_prefix == interface_id == 0", then the
 * netdev's address; cxgb4's c4iw_query_gid, i40iw's and irdma's likewise), and libibverbs
 * hands that table entry to ibv_query_gid(3), ibv_query_gid_ex(3) and
 * ibv_query_gid_table(3). The node GUID (ibv_query_device(3)) is the same MAC in modified
 * EUI-64 form, from which the check reads the MAC back.
 *   - ibv_query_gid(port 1, index 0): the MAC, then ten zero octets (it was the IPv4-mapped
 *     address, ::ffff:a.b.c.d, which no iWARP provider reports);
 *   - ibv_query_gid_ex and ibv_query_gid_table: the same GID; its type IBV_GID_TYPE_IB,
 *     what the kernel's GID cache gives an iWARP port's entries (config_non_roce_gid_cache;
 *     it was IBV_GID_TYPE_ROCE_V2, an IP-based type, for a GID that is not).
 * One process, no peer:
 *   gid_mac
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <infiniband/verbs.h>

static const char *contract_name = "gid_mac";
#include "contract.h"

static void hex(char *out, const uint8_t *b, int n)
{
	for (int i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
}

int main(void)
{
	struct ibv_context *ctx = contract_open_device();
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da))
		DIE("ibv_query_device: %s", strerror(errno));
	/* node_guid is in network order: MAC[0]^2, MAC[1], MAC[2], ff, fe, MAC[3..6]. */
	uint8_t g8[8], want[16] = { 0 };
	memcpy(g8, &da.node_guid, 8);
	if (g8[3] != 0xff || g8[4] != 0xfe)
		DIE("the node GUID is not a modified EUI-64");
	uint8_t mac[6] = { g8[0] ^ 0x02, g8[1], g8[2], g8[5], g8[6], g8[7] };
	memcpy(want, mac, 6);
	char w[33], got[33];
	hex(w, want, 16);

	union ibv_gid gid;
	memset(&gid, 0xAA, sizeof gid);
	int r = ibv_query_gid(ctx, 1, 0, &gid);
	hex(got, gid.raw, 16);
	EXPECT(r == 0 && memcmp(gid.raw, want, 16) == 0,
	       "ibv_query_gid(3): GID 0 is the port's MAC and ten zero octets, as siw reports it (want %s, got %d %s)", w,
	       r, got);

	struct ibv_gid_entry ge;
	r = ibv_query_gid_ex(ctx, 1, 0, &ge, 0);
	hex(got, ge.gid.raw, 16);
	EXPECT(r == 0 && memcmp(ge.gid.raw, want, 16) == 0,
	       "ibv_query_gid_ex(3): the same GID (want %s, got %d %s)", w, r, got);
	EXPECT(r == 0 && ge.gid_type == IBV_GID_TYPE_IB,
	       "ibv_query_gid_ex(3): of type IBV_GID_TYPE_IB, as the kernel's GID cache gives an iWARP port "
	       "(got %d, type %d)",
	       r, (int)ge.gid_type);

	struct ibv_gid_entry t[2];
	ssize_t k = ibv_query_gid_table(ctx, t, 2, 0);
	if (k >= 1)
		hex(got, t[0].gid.raw, 16);
	EXPECT(k == 1 && memcmp(t[0].gid.raw, want, 16) == 0,
	       "ibv_query_gid_table(3): one entry, the same GID (want %s, got %zd %s)", w, k, k >= 1 ? got : "-");
	return contract_end();
}
