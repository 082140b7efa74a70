/*
 * tests/fakes/cuda_app.c - an unmodified "CUDA program" for the preload tests.
 *
 * It reaches the driver as the CUDA runtime does: dlopen of the library named
 * by COMEM_CUDA_LIBRARY (the fake in CI), dlsym of cuGetProcAddress_v2 on that
 * handle, and every entry point through it. It knows nothing of comem. One
 * command a line on stdin, one answer a line on stdout:
 *
 *   alloc MIB      cuMemAlloc; answers "N RC" (N: the allocation's number)
 *   create MIB     cuMemCreate on device 0; answers "N RC"
 *   free N         cuMemFree or cuMemRelease of allocation N; answers "RC"
 *   lookup NAME    cuGetProcAddress of NAME; answers "RC"
 *   gpa            the cuGetProcAddress cuGetProcAddress hands out is used for the rest
 *   next NAME      dlsym(RTLD_NEXT, NAME) from here: "1" when it is what the global scope has
 *   quit
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe/cuda_abi.h"

#define MIB (1024ull * 1024ull)
#define MAX_ALLOCS 256

static PFN_cuGetProcAddress_v2 g_gpa;

static void *get(const char *name)
{
    void *p = NULL;
    CUresult r = g_gpa(name, &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, NULL);
    return r == CUDA_SUCCESS ? p : NULL;
}

int main(void)
{
    const char *lib = getenv("COMEM_CUDA_LIBRARY");
    void *h = dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("no driver: %s\n", dlerror());
        return 3;
    }
    void *gpa = dlsym(h, "cuGetProcAddress_v2");
    if (!gpa) {
        printf("no cuGetProcAddress_v2\n");
        return 3;
    }
    memcpy(&g_gpa, &gpa, sizeof g_gpa);
    PFN_cuInit init = (PFN_cuInit)get("cuInit");
    PFN_cuDevicePrimaryCtxRetain retain = (PFN_cuDevicePrimaryCtxRetain)get("cuDevicePrimaryCtxRetain");
    PFN_cuCtxSetCurrent set_current = (PFN_cuCtxSetCurrent)get("cuCtxSetCurrent");
    CUcontext ctx;
    if (!init || !retain || !set_current || init(0) != CUDA_SUCCESS || retain(&ctx, 0) != CUDA_SUCCESS ||
        set_current(ctx) != CUDA_SUCCESS) {
        printf("cannot set up a context\n");
        return 3;
    }
    static struct {
        unsigned long long key;
        int handle;
    } allocs[MAX_ALLOCS];
    int n = 0;
    printf("ready\n");
    fflush(stdout);
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        char cmd[32] = "", arg[160] = "";
        if (sscanf(line, "%31s %159s", cmd, arg) < 1)
            continue;
        if (!strcmp(cmd, "quit"))
            break;
        if (!strcmp(cmd, "alloc") || !strcmp(cmd, "create")) {
            size_t bytes = (size_t)strtoull(arg, NULL, 10) * MIB;
            CUresult r;
            unsigned long long key = 0;
            if (!strcmp(cmd, "alloc")) {
                PFN_cuMemAlloc alloc = (PFN_cuMemAlloc)get("cuMemAlloc");
                CUdeviceptr p = 0;
                r = alloc ? alloc(&p, bytes) : CUDA_ERROR_NOT_FOUND;
                key = p;
            } else {
                PFN_cuMemCreate create = (PFN_cuMemCreate)get("cuMemCreate");
                CUmemAllocationProp prop;
                memset(&prop, 0, sizeof prop);
                prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
                prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
                prop.location.id = 0;
                CUmemGenericAllocationHandle hd = 0;
                r = create ? create(&hd, bytes, &prop, 0) : CUDA_ERROR_NOT_FOUND;
                key = hd;
            }
            int idx = -1;
            if (r == CUDA_SUCCESS && n < MAX_ALLOCS) {
                idx = n++;
                allocs[idx].key = key;
                allocs[idx].handle = !strcmp(cmd, "create");
            }
            printf("%d %d\n", idx, (int)r);
        } else if (!strcmp(cmd, "free")) {
            int idx = atoi(arg);
            CUresult r = CUDA_ERROR_INVALID_VALUE;
            if (idx >= 0 && idx < n && allocs[idx].key) {
                if (allocs[idx].handle) {
                    PFN_cuMemRelease rel = (PFN_cuMemRelease)get("cuMemRelease");
                    r = rel ? rel(allocs[idx].key) : CUDA_ERROR_NOT_FOUND;
                } else {
                    PFN_cuMemFree fr = (PFN_cuMemFree)get("cuMemFree");
                    r = fr ? fr(allocs[idx].key) : CUDA_ERROR_NOT_FOUND;
                }
                allocs[idx].key = 0;
            }
            printf("%d\n", (int)r);
        } else if (!strcmp(cmd, "lookup")) {
            void *p = NULL;
            printf("%d\n", (int)g_gpa(arg, &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, NULL));
        } else if (!strcmp(cmd, "next")) {
            void *a = dlsym(RTLD_NEXT, arg), *b = dlsym(RTLD_DEFAULT, arg);
            printf("%d\n", a && a == b);
        } else if (!strcmp(cmd, "gpa")) {
            void *p = get("cuGetProcAddress");
            if (p)
                memcpy(&g_gpa, &p, sizeof g_gpa);
            printf("%d\n", p ? 0 : 500);
        } else {
            printf("unknown command\n");
        }
        fflush(stdout);
    }
    return 0;
}
