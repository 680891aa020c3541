/*
 * Contract: rdma_getaddrinfo(3) whose name or service the system's getaddrinfo refuses
 * returns getaddrinfo's EAI_* code, as librdmacm's does (rdma-core v44
 * librdmacm/addrinfo.c, ucma_getaddrinfo: `ret = getaddrinfo(...); if (ret) return ret;`),
 * and rdma_client, rdma_server, rdma_xclient and rdma_xserver print it with gai_strerror.
 * Before the fix it was -1 (errno EHOSTUNREACH or EINVAL), which gai_strerror reads as
 * EAI_BADFLAGS: "rdma_getaddrinfo: Bad value for ai_flags" for a mistyped host name.
 * One process, no peer:
 *   getaddrinfo_eai
 */
#include <errno.h>
#include <netdb.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "getaddrinfo_eai";
#include "contract.h"

/* getaddrinfo's own answer for node, service (no hints, as librdmacm passes none
 * without rdma hints). */
static int system_code(const char *node, const char *service, int flags)
{
	struct addrinfo h, *ai = NULL;
	memset(&h, 0, sizeof h);
	h.ai_flags = flags;
	int r = getaddrinfo(node, service, flags ? &h : NULL, &ai);
	if (!r)
		freeaddrinfo(ai);
	return r;
}

int main(void)
{
	/* No unknown host name is looked up: in a network namespace without a resolver a DNS
	 * query waits out its timeouts (docs/rdma-compat.md: a minute). A name under
	 * RAI_NUMERICHOST and an unknown service reach getaddrinfo's refusal without one. */
	struct rdma_addrinfo *res = NULL;
	struct rdma_addrinfo numeric = { .ai_flags = RAI_NUMERICHOST, .ai_port_space = RDMA_PS_TCP };
	int want = system_code("host.invalid", "7471", AI_NUMERICHOST);
	int r = rdma_getaddrinfo("host.invalid", "7471", &numeric, &res);
	EXPECT(want == EAI_NONAME && r == want, "RAI_NUMERICHOST with a name: EAI_NONAME (want %d, got %d \"%s\")", want,
	       r, gai_strerror(r));

	want = system_code("10.77.0.1", "no-such-service-warpcore", 0);
	r = rdma_getaddrinfo("10.77.0.1", "no-such-service-warpcore", NULL, &res);
	EXPECT(want != 0 && r == want, "an unknown service name: getaddrinfo's code (want %d \"%s\", got %d \"%s\")", want,
	       gai_strerror(want), r, gai_strerror(r));

	/* Names the system resolves still resolve. */
	r = rdma_getaddrinfo("localhost", "7471", NULL, &res);
	int ok = r == 0 && res && res->ai_dst_addr && res->ai_dst_addr->sa_family == AF_INET;
	struct sockaddr_in *d = ok ? (struct sockaddr_in *)res->ai_dst_addr : NULL;
	EXPECT(ok && ntohs(d->sin_port) == 7471 && ntohl(d->sin_addr.s_addr) == 0x7f000001,
	       "localhost:7471 resolves to 127.0.0.1:7471 (ret %d)", r);
	if (r == 0)
		rdma_freeaddrinfo(res);
	r = rdma_getaddrinfo("10.77.0.1", "7471", NULL, &res);
	EXPECT(r == 0, "10.77.0.1:7471 (ret %d, %s)", r, r ? strerror(errno) : "ok");
	if (r == 0)
		rdma_freeaddrinfo(res);
	return contract_end();
}
