/* strs.c LIB: print every enum-to-string helper's answers for a range of
 * values past each enum's end, from the libibverbs at path LIB; run against
 * the system's and ours, the outputs must be equal. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	static const char *const fns[] = {
		"ibv_node_type_str", "ibv_port_state_str", "ibv_wc_status_str", "ibv_event_type_str",
	};
	void *h;
	int i, v;

	if (argc != 2 || !(h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL))) {
		fprintf(stderr, "usage: strs LIB (%s)\n", dlerror());
		return 2;
	}
	for (i = 0; i < 4; i++) {
		const char *(*f)(int) = (const char *(*)(int))dlsym(h, fns[i]);

		if (!f)
			return 1;
		for (v = -2; v < 40; v++)
			printf("%s(%d) = %s\n", fns[i], v, f(v));
	}
	return 0;
}
