/*
 * client/wddm.c - this process's WDDM budget and usage told to the coordinator (client/wddm.h),
 * which adds up every process's per adapter (coord/wddm.c): under WDDM only a process can read how
 * much of a card it uses (probe/wddm.h). Each adapter is named by its LUID and, where this process
 * runs CUDA, by the UUID of the CUDA device with that LUID, which is how the coordinator knows the
 * card. Where there is no WDDM the reading says so at once and nothing is sent.
 */
#include "client/wddm.h"

#include "client/conn.h"
#include "client/frames.h"
#include "probe/cuda_luid.h"
#include "probe/wddm.h"

int comem_wddm_send(comem_client *c)
{
    comem_wddm_adapter a[COMEM_WDDM_MAX_ADAPTERS];
    int n = 0;
    int rc = comem_wddm_adapters(a, COMEM_WDDM_MAX_ADAPTERS, &n);
    if (rc != COMEM_OK)
        return rc;
    if (n == 0)
        return COMEM_ENOENT;
    pthread_mutex_lock(&c->lock);
    bool up = c->link != LINK_DOWN;
    uint64_t gen = c->gen;
    pthread_mutex_unlock(&c->lock);
    if (!up)
        return COMEM_ECLOSED;
    /* Which CUDA device each adapter is, where this process runs CUDA (nothing loaded to ask). */
    comem_cuda_luid cuda[COMEM_MAX_DEVICES];
    int n_cuda = 0;
    if (comem_cuda_luids(cuda, COMEM_MAX_DEVICES, &n_cuda) != COMEM_OK)
        n_cuda = 0;
    comem_msg m;
    return comem_conn_send(c, gen, comem_frame_wddm(&m, a, n, cuda, n_cuda));
}

int comem_wddm_report(comem_client *c)
{
    int owned = comem_client_owned(c);
    return owned != COMEM_OK ? owned : comem_wddm_send(c);
}
