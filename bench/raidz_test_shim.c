/*
 * LD_PRELOAD shim for OpenZFS raidz_test -B (used by bench/run.sh).
 *
 * raidz_test's benchmark walks every RAID-Z math implementation it knows, slowest
 * ("original") first, with gigabytes of work per line: unfiltered it runs for hours.
 * This shim wraps vdev_raidz_impl_set() so that, when RZT_IMPLS is set (a comma-separated
 * list such as "avx2"), selecting any other implementation fails the way an unsupported one
 * does, and raidz_test skips it. Names that are not implementations ("fastest", "cycle")
 * pass through. Written for this harness; contains no OpenZFS code.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int
allowed(const char *list, const char *name)
{
	size_t n = strlen(name);
	const char *p = list;

	while (p != NULL && *p != '\0') {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len == n && strncmp(p, name, n) == 0)
			return (1);
		p = end ? end + 1 : NULL;
	}
	return (0);
}

int
vdev_raidz_impl_set(const char *val)
{
	static int (*real)(const char *);
	const char *list = getenv("RZT_IMPLS");

	if (real == NULL)
		real = (int (*)(const char *))dlsym(RTLD_NEXT, "vdev_raidz_impl_set");
	if (real == NULL)
		return (EINVAL);
	if (list != NULL && val != NULL && strcmp(val, "fastest") != 0 &&
	    strcmp(val, "cycle") != 0 && !allowed(list, val))
		return (EINVAL);
	return (real(val));
}
