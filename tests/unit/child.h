/*
 * tests/unit/child.h - a child process for the platform layer's tests, on Linux and Windows: the
 * test program itself run again with --child MS [ARG] (child_main: it runs the test's hook with ARG,
 * sleeps MS milliseconds and exits).
 * Header-only (inline: a test that uses only own_pid includes it too).
 */
#ifndef COMEM_TEST_CHILD_H
#define COMEM_TEST_CHILD_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _WIN32
#include <windows.h>
#else
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

static const char *g_child_self; /* argv[0], to start the child */

static inline int64_t own_pid(void)
{
#ifdef _WIN32
    return (int64_t)GetCurrentProcessId();
#else
    return (int64_t)getpid();
#endif
}

/* The folder the tests and what they start were built into: COMEM_BIN_DIR, or (Windows) this program's. */
static inline const char *test_bin_dir(void)
{
    const char *env = getenv("COMEM_BIN_DIR");
    if (env && *env)
        return env;
#ifdef _WIN32
    static char dir[MAX_PATH];
    DWORD n = GetModuleFileNameA(NULL, dir, sizeof dir);
    while (n > 0 && dir[n - 1] != '\\' && dir[n - 1] != '/')
        n--;
    dir[n > 0 ? n - 1 : 0] = '\0';
    return dir;
#else
    return ".";
#endif
}

/* Sleeps ms milliseconds. */
static inline void pause_ms(int ms)
{
#ifdef _WIN32
    Sleep((DWORD)ms);
#else
    usleep((useconds_t)ms * 1000);
#endif
}

/* Waits up to max_ms for a file at path to exist (a child's word that it has done its part). */
static inline bool wait_for_file(const char *path, int max_ms)
{
    for (int waited = 0;; waited += 10) {
        FILE *f = fopen(path, "r");
        if (f) {
            fclose(f);
            return true;
        }
        if (waited >= max_ms)
            return false;
        pause_ms(10);
    }
}

/* What a child does before it sleeps, with the argument it was started with (start_child_with). */
typedef void (*child_hook)(const char *arg);

/* In main, first: true when this process is a child (it has run hook and slept; the caller returns 0). */
static inline bool child_main(int argc, char **argv, child_hook hook)
{
    g_child_self = argv[0];
    if (argc < 3 || argc > 4 || strcmp(argv[1], "--child") != 0)
        return false;
    if (argc == 4 && hook)
        hook(argv[3]);
#ifdef _WIN32
    Sleep((DWORD)atoi(argv[2]));
#else
    usleep((useconds_t)atoi(argv[2]) * 1000);
#endif
    return true;
}

/* Starts a child that runs the hook with arg (NULL: none) and sleeps ms: its pid; *handle (Windows) its process. */
static inline int64_t start_child_with(int ms, const char *arg, void **handle)
{
#ifdef _WIN32
    wchar_t exe[MAX_PATH], cmd[2 * MAX_PATH + 64];
    assert_true(GetModuleFileNameW(NULL, exe, MAX_PATH) > 0);
    if (arg)
        swprintf(cmd, sizeof cmd / sizeof cmd[0], L"\"%ls\" --child %d \"%hs\"", exe, ms, arg);
    else
        swprintf(cmd, sizeof cmd / sizeof cmd[0], L"\"%ls\" --child %d", exe, ms);
    STARTUPINFOW si = {.cb = sizeof si};
    PROCESS_INFORMATION pi;
    assert_true(CreateProcessW(exe, cmd, NULL, NULL, FALSE, 0, NULL, NULL, &si, &pi));
    CloseHandle(pi.hThread);
    *handle = pi.hProcess;
    return (int64_t)pi.dwProcessId;
#else
    char ms_text[16];
    snprintf(ms_text, sizeof ms_text, "%d", ms);
    char *argv[] = {(char *)g_child_self, "--child", ms_text, (char *)arg, NULL};
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, g_child_self, NULL, NULL, argv, NULL), 0);
    *handle = NULL;
    return (int64_t)pid;
#endif
}

/* Starts another program, argv[0] its path (NULL-terminated argv): its pid; *handle (Windows) its process. */
static inline int64_t start_program(char *const argv[], void **handle)
{
#ifdef _WIN32
    static char cmd[8192];
    size_t at = 0;
    for (int i = 0; argv[i]; i++) /* each argument quoted: none of ours holds a quote */
        at += (size_t)snprintf(cmd + at, sizeof cmd - at, "%s\"%s\"", i ? " " : "", argv[i]);
    STARTUPINFOA si = {.cb = sizeof si};
    PROCESS_INFORMATION pi;
    assert_true(CreateProcessA(argv[0], cmd, NULL, NULL, FALSE, 0, NULL, NULL, &si, &pi));
    CloseHandle(pi.hThread);
    *handle = pi.hProcess;
    return (int64_t)pi.dwProcessId;
#else
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, argv[0], NULL, NULL, argv, NULL), 0);
    *handle = NULL;
    return (int64_t)pid;
#endif
}

/* Starts a child that sleeps ms. */
static inline int64_t start_child(int ms, void **handle) { return start_child_with(ms, NULL, handle); }

/* Ends the child now. */
static inline void end_child(int64_t pid, void *handle)
{
#ifdef _WIN32
    (void)pid;
    assert_true(TerminateProcess(handle, 0));
#else
    (void)handle;
    assert_int_equal(kill((pid_t)pid, SIGTERM), 0);
#endif
}

/* Waits for the child to end by itself and lets its pid go: its exit code. */
static inline int wait_child(int64_t pid, void *handle)
{
#ifdef _WIN32
    (void)pid;
    DWORD code = 255;
    assert_int_equal(WaitForSingleObject(handle, 60000), WAIT_OBJECT_0);
    assert_true(GetExitCodeProcess(handle, &code));
    CloseHandle(handle);
    return (int)code;
#else
    (void)handle;
    int st = 0;
    assert_int_equal(waitpid((pid_t)pid, &st, 0), (pid_t)pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
#endif
}

/* Lets the child's pid go (Linux: reaps the zombie; Windows: closes the handle). */
static inline void release_child(int64_t pid, void *handle)
{
#ifdef _WIN32
    (void)pid;
    CloseHandle(handle);
#else
    (void)handle;
    int st;
    assert_int_equal(waitpid((pid_t)pid, &st, 0), (pid_t)pid);
#endif
}

#endif
