/*
 * bindlo: an LD_PRELOAD shim that keeps a server on the loopback interface.
 *
 * DynamoDB Local has no option to choose its listen address: its Jetty server binds the wildcard
 * address, so it would be reachable from the network while tests run. Preloaded into its JVM (which
 * the stack starts with -Djava.net.preferIPv4Stack=true, so sockets are AF_INET), this shim rewrites
 * every bind() to 0.0.0.0 into a bind() to 127.0.0.1 (and :: to ::1). Built by the local stack
 * (test/stack) with the system C compiler into the repository's .cache/ folder.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
	static bind_fn real_bind;
	if (!real_bind) {
		real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
	}
	if (addr && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
		struct sockaddr_in in4;
		memcpy(&in4, addr, sizeof in4);
		if (in4.sin_addr.s_addr == htonl(INADDR_ANY)) {
			in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
			return real_bind(fd, (const struct sockaddr *)&in4, sizeof in4);
		}
	} else if (addr && addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		struct sockaddr_in6 in6;
		memcpy(&in6, addr, sizeof in6);
		if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr)) {
			in6.sin6_addr = in6addr_loopback;
			return real_bind(fd, (const struct sockaddr *)&in6, sizeof in6);
		}
	}
	return real_bind(fd, addr, len);
}
