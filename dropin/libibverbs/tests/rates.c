/* rates.c LIB: print the static rate conversions' answers for every rate
 * and a range of multiples and Mb/s values, from the libibverbs at path LIB;
 * run against the system's and ours, the outputs must be equal. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	static const int mbps[] = {
		0, 1, 2500, 5000, 10000, 14062, 14063, 20000, 25000, 25781, 28125, 30000,
		40000, 50000, 53125, 56250, 60000, 80000, 100000, 103125, 112500, 120000,
		168750, 206250, 309375, 425000, 637500, 850000, 1275000,
	};
	int (*to_mult)(int), (*from_mult)(int), (*to_mbps)(int), (*from_mbps)(int);
	void *h;
	int v;

	if (argc != 2 || !(h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL))) {
		fprintf(stderr, "usage: rates LIB (%s)\n", dlerror());
		return 2;
	}
	to_mult = (int (*)(int))dlsym(h, "ibv_rate_to_mult");
	from_mult = (int (*)(int))dlsym(h, "mult_to_ibv_rate");
	to_mbps = (int (*)(int))dlsym(h, "ibv_rate_to_mbps");
	from_mbps = (int (*)(int))dlsym(h, "mbps_to_ibv_rate");
	if (!to_mult || !from_mult || !to_mbps || !from_mbps)
		return 1;
	for (v = -2; v < 30; v++)
		printf("rate %d: mult %d mbps %d\n", v, to_mult(v), to_mbps(v));
	for (v = -1; v <= 500; v++)
		printf("mult %d: rate %d\n", v, from_mult(v));
	for (v = 0; v < (int)(sizeof(mbps) / sizeof(mbps[0])); v++)
		printf("mbps %d: rate %d\n", mbps[v], from_mbps(mbps[v]));
	return 0;
}
