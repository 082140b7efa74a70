/*
 * probe/hostmem_win.c - host RAM on Windows, behind probe/hostmem.h (Linux: hostmem.c).
 *
 * GlobalMemoryStatusEx gives what psutil's virtual_memory() gives ComfyUI on
 * Windows: the physical total and what is available. Swap is the page file's
 * share of the commit limit (the commit limit less physical memory), all of it
 * on disk, so disk_swap equals swap_total.
 *
 * Windows has no cgroups; its counterpart is a job object's memory limit
 * (JOB_OBJECT_LIMIT_JOB_MEMORY for the whole job, JOB_OBJECT_LIMIT_PROCESS_MEMORY
 * for each process), which a container or a launcher sets and which binds
 * this process as hard as a cgroup's memory.max binds on Linux. The smaller of
 * the two is the limit, applied with the cgroup rule (arith/cgroup.h); its
 * usage is not read (a job's current commit is a Windows 10 query that wine
 * and older systems lack), so available is clamped to the limit alone.
 * ComfyUI reads no job limit: comem does, because the limit is real.
 *
 * root names a stand-in tree on Linux only; here it must be NULL or "".
 */
#include <windows.h>
#include <psapi.h>

#include <stdlib.h>
#include <string.h>

#include "arith/cgroup.h"
#include "comem/common.h"
#include "probe/hostmem.h"
#include "probe/hostram.h"

const char *comem_hostmem_root(const char *root) { return root ? root : ""; }

/* The job's binding memory limit, if this process runs in a job that has one. */
static bool job_limit(int64_t *limit)
{
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION info;
    memset(&info, 0, sizeof info);
    /* NULL: the job this process is in, if any (fails, or reports no limits, when it is in none). */
    if (!QueryInformationJobObject(NULL, JobObjectExtendedLimitInformation, &info, sizeof info, NULL))
        return false;
    DWORD flags = info.BasicLimitInformation.LimitFlags;
    bool found = false;
    int64_t lim = INT64_MAX;
    if ((flags & JOB_OBJECT_LIMIT_JOB_MEMORY) && info.JobMemoryLimit > 0) {
        lim = (int64_t)info.JobMemoryLimit;
        found = true;
    }
    if ((flags & JOB_OBJECT_LIMIT_PROCESS_MEMORY) && info.ProcessMemoryLimit > 0 &&
        (int64_t)info.ProcessMemoryLimit < lim) {
        lim = (int64_t)info.ProcessMemoryLimit;
        found = true;
    }
    if (found)
        *limit = lim;
    return found;
}

int comem_hostmem_read(const char *root, comem_hostmem *out)
{
    memset(out, 0, sizeof *out);
    if (root && root[0])
        return COMEM_ENOTSUP; /* stand-in trees are /proc and /sys shaped: Linux's */
    MEMORYSTATUSEX ms;
    memset(&ms, 0, sizeof ms);
    ms.dwLength = sizeof ms;
    if (!GlobalMemoryStatusEx(&ms))
        return COMEM_EIO;
    out->mem_total = (int64_t)ms.ullTotalPhys;
    out->mem_available = (int64_t)ms.ullAvailPhys;
    out->swap_total = ms.ullTotalPageFile > ms.ullTotalPhys ? (int64_t)(ms.ullTotalPageFile - ms.ullTotalPhys) : 0;
    out->disk_swap = out->swap_total;

    comem_cgroup_in in = {.host_total = out->mem_total, .host_available = out->mem_available};
    in.limit_found = job_limit(&in.limit);
    comem_cgroup_out co;
    comem_cgroup_clamp(&in, &co);
    out->cgroup_limited = co.limited;
    out->cgroup_limit = co.limit;
    out->cgroup_usage_known = false;
    out->cgroup_usage = -1;
    if (co.limited)
        strcpy(out->cgroup_dir, "job object");
    out->total = co.total;
    out->available = co.available;
    return COMEM_OK;
}

/* probe/hostram.h: a process's resident set is its working set (what psutil's rss is on Windows). */
int comem_hostram_rss(const char *root, int32_t pid, int64_t *bytes)
{
    (void)root; /* no stand-in trees here */
    HANDLE h = pid > 0 ? OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, FALSE, (DWORD)pid) : NULL;
    if (!h)
        return COMEM_ENOENT;
    PROCESS_MEMORY_COUNTERS pmc = {.cb = sizeof pmc};
    DWORD code = 0;
    bool ok = K32GetProcessMemoryInfo(h, &pmc, sizeof pmc) && GetExitCodeProcess(h, &code) && code == STILL_ACTIVE;
    CloseHandle(h);
    if (!ok)
        return COMEM_ENOENT; /* gone, or nothing this user may read */
    *bytes = pmc.WorkingSetSize > (SIZE_T)INT64_MAX ? INT64_MAX : (int64_t)pmc.WorkingSetSize;
    return COMEM_OK;
}
