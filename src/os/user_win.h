/* os/user_win.h - who a process runs as, and objects only that user may open (Windows; for the *_win.c backends). */
#ifndef COMEM_OS_USER_WIN_H
#define COMEM_OS_USER_WIN_H

#include <stdbool.h>
#include <stddef.h>
#include <windows.h>

/* Room for a token's user (a TOKEN_USER and its SID): what comem_user_sid fills. */
#define COMEM_USER_SID_ROOM (sizeof(TOKEN_USER) + SECURITY_MAX_SID_SIZE)

/* The user SID of process's token, kept in buf (COMEM_USER_SID_ROOM bytes); NULL when it cannot be read. */
PSID comem_user_sid(HANDLE process, BYTE *buf, DWORD len);

/* A SID as text (S-1-5-...) into buf; false when it cannot be written. */
bool comem_sid_text(PSID sid, char *buf, size_t len);

/* The user SID of process's token as text (S-1-5-...) into buf; false when it cannot be read. */
bool comem_user_sid_text(HANDLE process, char *buf, size_t len);

/*
 * Fills sa with a security descriptor owned by this process's user whose protected access list
 * lets that user alone in (free sa->lpSecurityDescriptor with LocalFree). False when it cannot be made.
 */
bool comem_user_only(SECURITY_ATTRIBUTES *sa);

/*
 * The name of a kernel object of this user's known by text (a path, a lock's name): "Local\comem-
 * <kind>-<the user's SID>-<FNV-1a of text>", UTF-16 (free it), so two users' objects never share a
 * name and a name is short whatever text is. NULL when the SID cannot be read or memory is short.
 */
wchar_t *comem_user_object_name(const char *kind, const char *text);

/* Whether the kernel object behind h is owned by this process's user (a named one another may have made first). */
bool comem_user_owns(HANDLE h);

#endif
