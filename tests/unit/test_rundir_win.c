/*
 * tests/unit/test_rundir_win.c - the runtime folder and the pipe's name on Windows
 * (base/rundir_win.c), under wine in CI.
 *
 * The default folder is %LOCALAPPDATA%\comem, made for this user alone and accepted again; a
 * folder others may reach (made with an access list granting Everyone), a file, and a name that
 * is not UTF-8 are refused with a reason that names what is wrong; the default pipe's name is
 * \\.\pipe\comem-<this user's SID>; a name given (or in COMEM_SOCKET) must be a pipe's.
 */
#include "unit/cmocka_all.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>
#include <sddl.h>

#include "base/rundir.h"
#include "comem/comem.h"
#include "comem/common.h"

static char g_tmp[MAX_PATH];

static int setup(void **s)
{
    (void)s;
    char base[MAX_PATH];
    assert_true(GetTempPathA(sizeof base, base) > 0);
    snprintf(g_tmp, sizeof g_tmp, "%scomem-rundir-test-%lu", base, (unsigned long)GetCurrentProcessId());
    CreateDirectoryA(g_tmp, NULL);
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    const char *const leaves[] = {"file", "open", "mine"};
    char path[MAX_PATH + 16];
    for (size_t i = 0; i < sizeof leaves / sizeof leaves[0]; i++) {
        snprintf(path, sizeof path, "%s\\%s", g_tmp, leaves[i]);
        if (!DeleteFileA(path))
            RemoveDirectoryA(path);
    }
    RemoveDirectoryA(g_tmp);
    return 0;
}

static void test_default_folder_is_private(void **s)
{
    (void)s;
    _putenv("COMEM_RUNTIME_DIR=");
    char dir[MAX_PATH], local[MAX_PATH], want[MAX_PATH + 8], why[400] = "";
    assert_true(GetEnvironmentVariableA("LOCALAPPDATA", local, sizeof local) > 0);
    snprintf(want, sizeof want, "%s\\comem", local);
    assert_int_equal(comem_runtime_dir_why(dir, sizeof dir, why, sizeof why), COMEM_OK);
    assert_string_equal(dir, want);
    DWORD attrs = GetFileAttributesA(dir);
    assert_true(attrs != INVALID_FILE_ATTRIBUTES && (attrs & FILE_ATTRIBUTE_DIRECTORY));
    assert_int_equal(comem_runtime_dir(dir, sizeof dir), COMEM_OK); /* made before: accepted as it is */
    char tiny[8];
    assert_int_equal(comem_runtime_dir_why(tiny, sizeof tiny, why, sizeof why), COMEM_ERANGE);
    assert_non_null(strstr(why, "too long"));
}

static void test_a_folder_others_reach_is_refused(void **s)
{
    (void)s;
    char open_dir[MAX_PATH + 16], why[400] = "";
    snprintf(open_dir, sizeof open_dir, "%s\\open", g_tmp);
    SECURITY_ATTRIBUTES sa = {sizeof sa, NULL, FALSE};
    assert_true(ConvertStringSecurityDescriptorToSecurityDescriptorA("D:P(A;OICI;FA;;;WD)", SDDL_REVISION_1,
                                                                     &sa.lpSecurityDescriptor, NULL));
    assert_true(CreateDirectoryA(open_dir, &sa));
    LocalFree(sa.lpSecurityDescriptor);
    assert_int_equal(comem_private_dir_why(open_dir, why, sizeof why), COMEM_EPERM);
    assert_non_null(strstr(why, "S-1-1-0")); /* Everyone, by its SID */
    assert_non_null(strstr(why, "icacls"));
    /* The same name through COMEM_RUNTIME_DIR: refused the same way. */
    char env[MAX_PATH + 40], dir[MAX_PATH];
    snprintf(env, sizeof env, "COMEM_RUNTIME_DIR=%s", open_dir);
    _putenv(env);
    assert_int_equal(comem_runtime_dir(dir, sizeof dir), COMEM_EPERM);
    /* A private one made here is accepted. */
    snprintf(env, sizeof env, "COMEM_RUNTIME_DIR=%s\\mine", g_tmp);
    _putenv(env);
    assert_int_equal(comem_runtime_dir(dir, sizeof dir), COMEM_OK);
    _putenv("COMEM_RUNTIME_DIR=");
}

static void test_a_file_and_a_bad_name_are_refused(void **s)
{
    (void)s;
    char file[MAX_PATH + 16], why[400] = "";
    snprintf(file, sizeof file, "%s\\file", g_tmp);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(comem_private_dir_why(file, why, sizeof why), COMEM_EPERM);
    assert_non_null(strstr(why, "must be a folder"));
    assert_int_equal(comem_private_dir_why("bad\xff name", why, sizeof why), COMEM_EINVAL);
    assert_non_null(strstr(why, "UTF-8"));
}

static void test_pipe_names(void **s)
{
    (void)s;
    HANDLE tok;
    assert_true(OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &tok));
    BYTE ubuf[256];
    DWORD n = 0;
    assert_true(GetTokenInformation(tok, TokenUser, ubuf, sizeof ubuf, &n));
    CloseHandle(tok);
    LPSTR sid = NULL;
    assert_true(ConvertSidToStringSidA(((TOKEN_USER *)ubuf)->User.Sid, &sid));
    char want[300], name[300], why[400] = "";
    snprintf(want, sizeof want, "\\\\.\\pipe\\comem-%s", sid);
    LocalFree(sid);
    _putenv("COMEM_SOCKET=");
    assert_int_equal(comem_default_socket(name, sizeof name), COMEM_OK);
    assert_string_equal(name, want);
    assert_int_equal(comem_socket_resolve(NULL, name, sizeof name), COMEM_OK);
    assert_string_equal(name, want);
    assert_int_equal(comem_socket_resolve("\\\\.\\pipe\\mine", name, sizeof name), COMEM_OK);
    assert_string_equal(name, "\\\\.\\pipe\\mine");
    _putenv("COMEM_SOCKET=\\\\.\\pipe\\fromenv");
    assert_int_equal(comem_socket_resolve(NULL, name, sizeof name), COMEM_OK);
    assert_string_equal(name, "\\\\.\\pipe\\fromenv");
    _putenv("COMEM_SOCKET=");
    assert_int_equal(comem_socket_resolve_why("C:\\comem.sock", name, sizeof name, why, sizeof why), COMEM_EINVAL);
    assert_non_null(strstr(why, "not a pipe's name"));
    char small[16];
    assert_int_equal(comem_default_socket(small, sizeof small), COMEM_ERANGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_folder_is_private),
        cmocka_unit_test(test_a_folder_others_reach_is_refused),
        cmocka_unit_test(test_a_file_and_a_bad_name_are_refused),
        cmocka_unit_test(test_pipe_names),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
