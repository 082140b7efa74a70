#include "base/pidfd.h"

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

int comem_pidfd_open(int32_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
#else
    (void)pid;
    return -1;
#endif
}
