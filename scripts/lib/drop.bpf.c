// A tc direct-action classifier that drops IPv4 frames at random: LOSS_PPM parts per
// million (compile with -DLOSS_PPM=N). bench/loss.sh and scripts/test-tcp-kernel.sh attach
// it to the egress of bridge ports between network namespaces (scripts/lib/lossnet.sh):
// this kernel has no netem, and a filter on the very port net_af_packet sends on does not
// see its frames, while one on a bridge port in between does. ARP is never dropped, so the
// loss applies to the traffic measured, not to address resolution.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>

#ifndef LOSS_PPM
#define LOSS_PPM 0
#endif

static __u32 (*bpf_get_prandom_u32)(void) = (void *)BPF_FUNC_get_prandom_u32;

__attribute__((section("classifier"), used)) int drop(struct __sk_buff *skb)
{
    if (skb->protocol != __builtin_bswap16(ETH_P_IP))
        return TC_ACT_OK;
    if (bpf_get_prandom_u32() % 1000000 < LOSS_PPM)
        return TC_ACT_SHOT;
    return TC_ACT_OK;
}

char _license[] __attribute__((section("license"), used)) = "GPL";
