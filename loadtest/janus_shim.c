/*
 * LD_PRELOAD shim for benchmarking Janus inside a network namespace whose only interface is
 * lo: Janus (libnice) skips every interface flagged IFF_LOOPBACK when it gathers ICE host
 * candidates, even with ice_enforce_list = "lo", and then fails each PeerConnection (490).
 * This getifaddrs() returns the real list with IFF_LOOPBACK cleared, so 127.0.0.1 becomes an
 * ordinary host candidate. Compiled at run time by loadtest/janus.py; never commit the .so.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stddef.h>

int getifaddrs(struct ifaddrs **ifap)
{
    int (*real)(struct ifaddrs **) = (int (*)(struct ifaddrs **))dlsym(RTLD_NEXT, "getifaddrs");
    if (real == NULL)
        return -1;
    int rc = real(ifap);
    if (rc != 0)
        return rc;
    for (struct ifaddrs *ifa = *ifap; ifa != NULL; ifa = ifa->ifa_next)
        ifa->ifa_flags &= ~(unsigned int)IFF_LOOPBACK;
    return 0;
}
