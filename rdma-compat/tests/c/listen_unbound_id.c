/*
 * Contract: rdma_listen(3) on an id never bound (no rdma_bind_addr: the kernel binds it to
 * any address and an ephemeral port, which rdma_get_src_port then reports) gives each
 * connection request's new id the device and its protection domain (event->id->verbs and
 * ->pd), as librdmacm's ucma_get_device gives every request's id: the application creates
 * the QP on them (rdma_create_qp with a NULL PD) and registers memory on id->pd. Before the
 * fix the new id copied the unbound listener's NULL verbs and had a NULL pd, and a program
 * using them crashed or failed.
 *
 * The server listens on PORT (bound) and on an unbound id; it accepts the client's first
 * connection with the unbound listener's port as private data, and answers the client's
 * connection to that port with a rejection whose private data says what the request's id
 * had. The client judges.
 *   listen_unbound_id -s ADDR PORT | -c ADDR PORT
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
static const char *contract_name = "listen_unbound_id";
#include "contract.h"

/* What the request on the unbound listener had, sent back in the rejection. */
struct seen {
	uint8_t verbs, pd, pd_on_device, qp, mr;
};

static int server(const char *addr, const char *port_s)
{
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *l = contract_listener(ec, addr, contract_port(port_s));
	struct rdma_cm_id *l2;
	if (rdma_create_id(ec, &l2, NULL, RDMA_PS_TCP) || rdma_listen(l2, 4))
		DIE("a listener never bound: %s", strerror(errno));
	uint16_t lport = rdma_get_src_port(l2);
	if (!lport)
		DIE("the unbound listener reports port 0");
	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, 10000);
	struct rdma_cm_id *id = ev->id;
	rdma_ack_cm_event(ev);
	contract_qp_on(id);
	struct rdma_conn_param cp = contract_conn_param(1, 1, &lport, sizeof lport);
	if (rdma_accept(id, &cp))
		DIE("rdma_accept: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, 10000));

	ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, 10000);
	struct rdma_cm_id *c2 = ev->id;
	if (ev->listen_id != l2)
		DIE("the second request came on another listener");
	rdma_ack_cm_event(ev);
	struct seen s = { .verbs = c2->verbs != NULL, .pd = c2->pd != NULL };
	s.pd_on_device = c2->pd && c2->verbs && c2->pd->context == c2->verbs;
	static char buf[64];
	struct ibv_mr *mr = c2->pd ? ibv_reg_mr(c2->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	s.mr = mr != NULL;
	if (c2->verbs) {
		struct ibv_qp_init_attr at;
		memset(&at, 0, sizeof at);
		at.qp_type = IBV_QPT_RC;
		at.cap.max_send_wr = at.cap.max_recv_wr = 4;
		at.cap.max_send_sge = at.cap.max_recv_sge = 1;
		s.qp = rdma_create_qp(c2, NULL, &at) == 0;
	}
	if (rdma_reject(c2, &s, sizeof s))
		DIE("rdma_reject: %s", strerror(errno));
	if (s.qp)
		rdma_destroy_qp(c2);
	if (mr)
		ibv_dereg_mr(mr);
	rdma_destroy_id(c2);
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_DISCONNECTED, 20000));
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_id(l2);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

static int client(const char *addr, const char *port_s)
{
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *id = contract_active(ec, addr, contract_port(port_s), 5000);
	if (rdma_connect(id, NULL))
		DIE("rdma_connect: %s", strerror(errno));
	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, 10000);
	uint16_t lport = 0;
	if (ev->param.conn.private_data_len >= sizeof lport)
		memcpy(&lport, ev->param.conn.private_data, sizeof lport);
	rdma_ack_cm_event(ev);
	if (!lport)
		DIE("no port of the unbound listener in the accept's private data");

	/* A connection to the unbound listener, which the server answers with what it saw. */
	struct rdma_cm_id *id2 = contract_active(ec, addr, ntohs(lport), 5000);
	if (rdma_connect(id2, NULL))
		DIE("rdma_connect to the unbound listener: %s", strerror(errno));
	ev = contract_expect_event(ec, RDMA_CM_EVENT_REJECTED, 10000);
	struct seen s;
	memset(&s, 0, sizeof s);
	int len = ev->param.conn.private_data_len;
	if (len >= (int)sizeof s)
		memcpy(&s, ev->param.conn.private_data, sizeof s);
	rdma_ack_cm_event(ev);
	if (len < (int)sizeof s)
		DIE("the rejection carries %d octets of private data, not the %zu of the server's verdict", len,
		    sizeof s);
	EXPECT(s.verbs && s.pd && s.pd_on_device,
	       "rdma_listen(3) on an id never bound (port %u): the request's new id has the device and its PD "
	       "(event->id->verbs %s, ->pd %s, the PD on that device %s)",
	       ntohs(lport), s.verbs ? "set" : "NULL", s.pd ? "set" : "NULL", s.pd_on_device ? "yes" : "no");
	EXPECT(s.qp && s.mr,
	       "rdma_create_qp(3) with a NULL PD and ibv_reg_mr(3) on id->pd work on that id (QP %s, MR %s)",
	       s.qp ? "made" : "refused", s.mr ? "registered" : "refused");
	rdma_destroy_qp(id2);
	rdma_destroy_id(id2);
	contract_hang_up(ec, id, 10000);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
