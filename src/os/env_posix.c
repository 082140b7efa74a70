/* os/env_posix.c - os/env.h: getenv reads the process's environment itself. */
#include "os/env.h"

#include <stdlib.h>

const char *comem_env(const char *name) { return getenv(name); }
