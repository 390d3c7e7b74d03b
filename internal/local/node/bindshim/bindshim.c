// bindshim gives each pod on a process node its own copy of the ports it declares, as its own network
// namespace would: preloaded into a pod's dynamically linked programs (LD_PRELOAD), it turns bind() to the
// wildcard address (0.0.0.0, or :: on a dual-stack socket) on one of the container's declared ports
// (TRAININGJOB_LOCAL_PORTS, comma-separated) into bind() to the pod's address (TRAININGJOB_LOCAL_POD_IP).
// Two jobs' rank 0 can then both listen on port 29500 (PyTorch's TCPStore, TensorFlow's server and JAX's
// coordinator bind the wildcard). Other ports are left alone: programs that listen on a free port they
// pick and advertise the host's address (XGBoost's Rabit workers) keep working. Statically linked programs
// (Go) are not affected; they should bind POD_IP.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

// declared: port is in the comma-separated list ports.
static int declared(const char *ports, unsigned port) {
	if (!ports || port == 0) return 0;
	for (const char *p = ports; *p;) {
		char *end;
		unsigned long v = strtoul(p, &end, 10);
		if (end == p) return 0;
		if (v == port) return 1;
		p = *end == ',' ? end + 1 : end;
	}
	return 0;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
	static bind_fn real;
	if (!real) real = (bind_fn)dlsym(RTLD_NEXT, "bind");
	const char *ip = getenv("TRAININGJOB_LOCAL_POD_IP"), *ports = getenv("TRAININGJOB_LOCAL_PORTS");
	struct in_addr pod;
	if (!ip || !addr || inet_pton(AF_INET, ip, &pod) != 1) return real(fd, addr, len);
	if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
		struct sockaddr_in in;
		memcpy(&in, addr, sizeof in);
		if (in.sin_addr.s_addr == htonl(INADDR_ANY) && declared(ports, ntohs(in.sin_port))) {
			in.sin_addr = pod;
			return real(fd, (const struct sockaddr *)&in, sizeof in);
		}
	}
	if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		struct sockaddr_in6 in6;
		int v6only = 0;
		socklen_t optlen = sizeof v6only;
		memcpy(&in6, addr, sizeof in6);
		if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr) && declared(ports, ntohs(in6.sin6_port)) && getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &optlen) == 0 && !v6only) {
			memset(&in6.sin6_addr, 0, sizeof in6.sin6_addr); // ::ffff:<pod address>
			in6.sin6_addr.s6_addr[10] = 0xff;
			in6.sin6_addr.s6_addr[11] = 0xff;
			memcpy(&in6.sin6_addr.s6_addr[12], &pod, 4);
			return real(fd, (const struct sockaddr *)&in6, sizeof in6);
		}
	}
	return real(fd, addr, len);
}
