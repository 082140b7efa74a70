/*
 * os/env.h - an environment variable as the process has it now.
 *
 * On Windows a DLL's C runtime keeps its own copy of the environment, made when it loaded: a
 * variable the host program sets later (Python's os.environ, say) is in the process's environment
 * but not in that copy, so getenv in comem.dll would not see it. comem reads the process's own
 * environment there (env_win.c); elsewhere getenv is that (env_posix.c).
 */
#ifndef COMEM_OS_ENV_H
#define COMEM_OS_ENV_H

/*
 * The value of name (UTF-8), or NULL when it is unset. The string is valid until the process's
 * environment changes (POSIX) or until this thread's fourth next call (Windows): copy what is kept.
 */
const char *comem_env(const char *name);

#endif
