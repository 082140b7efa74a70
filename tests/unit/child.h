/*
 * tests/unit/child.h - a child process for the platform layer's tests, on Linux and Windows: the
 * test program itself run again with --child MS (child_main: it sleeps MS milliseconds and exits).
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

/* In main, first: true when this process is a child (it has slept and the caller returns 0). */
static inline bool child_main(int argc, char **argv)
{
    g_child_self = argv[0];
    if (argc != 3 || strcmp(argv[1], "--child") != 0)
        return false;
#ifdef _WIN32
    Sleep((DWORD)atoi(argv[2]));
#else
    usleep((useconds_t)atoi(argv[2]) * 1000);
#endif
    return true;
}

/* Starts a child that sleeps ms: its pid; *handle (Windows) its process handle. */
static inline int64_t start_child(int ms, void **handle)
{
#ifdef _WIN32
    wchar_t exe[MAX_PATH], cmd[MAX_PATH + 32];
    assert_true(GetModuleFileNameW(NULL, exe, MAX_PATH) > 0);
    swprintf(cmd, sizeof cmd / sizeof cmd[0], L"\"%ls\" --child %d", exe, ms);
    STARTUPINFOW si = {.cb = sizeof si};
    PROCESS_INFORMATION pi;
    assert_true(CreateProcessW(exe, cmd, NULL, NULL, FALSE, 0, NULL, NULL, &si, &pi));
    CloseHandle(pi.hThread);
    *handle = pi.hProcess;
    return (int64_t)pi.dwProcessId;
#else
    char arg[16];
    snprintf(arg, sizeof arg, "%d", ms);
    char *argv[] = {(char *)g_child_self, "--child", arg, NULL};
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, g_child_self, NULL, NULL, argv, NULL), 0);
    *handle = NULL;
    return (int64_t)pid;
#endif
}

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
