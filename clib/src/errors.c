/* errors.c: descriptions of return codes, the lock manager's code names,
 * and the errno behind SHMLOCK_ESYS. */
#include <string.h>

#include "internal.h"

static _Thread_local int last_errno;

int shm_sys_error(int err)
{
	last_errno = err;
	return SHMLOCK_ESYS;
}

SHM_EXPORT int shmlock_errno(void) { return last_errno; }

SHM_EXPORT const char *shmlock_version(void) { return "1.2.0"; }

struct code {
	int rc;
	const char *code; /* the lock manager's name, or NULL */
	const char *text;
};

static const struct code codes[] = {
	{SHMLOCK_OK, NULL, "success"},
	{SHMLOCK_OWNERDEAD, NULL, "lock held: reclaimed from a dead holder"},
	{SHMLOCK_INCONSISTENT, NULL, "lock held: an earlier holder died and the lock was not marked consistent"},
	{SHMLOCK_ESYS, NULL, "system call failed"},
	{SHMLOCK_EINVAL, NULL, "invalid argument"},
	{SHMLOCK_ENOMEM, NULL, "out of memory"},
	{SHMLOCK_ECLOSED, "CLOSED", "segment or handle is closed"},
	{SHMLOCK_EEXIST, NULL, "segment already exists"},
	{SHMLOCK_EBADPATH, NULL, "bad segment path"},
	{SHMLOCK_ESYMLINK, NULL, "segment path is a symbolic link"},
	{SHMLOCK_ENOTREGULAR, NULL, "segment is not a regular file"},
	{SHMLOCK_EFOREIGNOWNER, NULL, "segment is owned by another user"},
	{SHMLOCK_EPERMISSIVE, NULL, "segment's file mode grants access to others"},
	{SHMLOCK_EFOREIGNPIDNS, NULL, "segment was made in another PID namespace"},
	{SHMLOCK_ENOTREADY, NULL, "segment was never completed by its creator"},
	{SHMLOCK_EREADONLY, "READ_ONLY", "segment is open read-only"},
	{SHMLOCK_ETRUNCATED, NULL, "segment is truncated"},
	{SHMLOCK_EBADMAGIC, NULL, "not a shmlock segment (bad magic)"},
	{SHMLOCK_EVERSION, NULL, "unsupported format version"},
	{SHMLOCK_ESIZE, NULL, "file size does not match the header"},
	{SHMLOCK_EMALFORMED, NULL, "malformed header"},
	{SHMLOCK_ETABLERANGE, NULL, "table out of range"},
	{SHMLOCK_ETABLEOVERLAP, NULL, "tables overlap"},
	{SHMLOCK_ELIMIT, NULL, "over a limit"},
	{SHMLOCK_ECHECKSUM, NULL, "header checksum mismatch"},
	{SHMLOCK_EBADNAME, NULL, "bad name"},
	{SHMLOCK_EINDEX, NULL, "table index out of range"},
	{SHMLOCK_ETABLEFULL, NULL, "table is full"},
	{SHMLOCK_ENOTFOUND, NULL, "no entry by that name"},
	{SHMLOCK_EUSEMISMATCH, NULL, "entry is claimed for another use"},
	{SHMLOCK_ENOTABLE, "NO_LOCK_TABLE", "segment has no such table"},
	{SHMLOCK_EREGIONSIZE, NULL, "bad data region size"},
	{SHMLOCK_EDATAFULL, NULL, "data area is full"},
	{SHMLOCK_EFILECHANGED, NULL, "segment file was replaced while it was checked"},
	{SHMLOCK_ENOSPACE, NULL, "no room for the segment in its file system or memory limit"},
	{SHMLOCK_ENOPROCFS, NULL, "/proc is not mounted"},
	{SHMLOCK_EWOULDBLOCK, NULL, "lock is held"},
	{SHMLOCK_ETIMEDOUT, NULL, "timed out"},
	{SHMLOCK_ENOTOWNER, NULL, "not held by this holder"},
	{SHMLOCK_ENOTHELD, NULL, "not held in that mode by this handle"},
	{SHMLOCK_ERECURSION, NULL, "recursion depth limit reached"},
	{SHMLOCK_EBADIDENTITY, NULL, "holder does not fit the lock's mode"},
	{SHMLOCK_EHELD, NULL, "this handle already holds the lock in a conflicting mode"},
	{SHMLOCK_EOVERFLOW, NULL, "too many shared holds by one handle"},
	{SHMLOCK_ETOOMANYREADERS, NULL, "every reader record of the mutex is in use"},
	{SHMLOCK_ECHANGED, NULL, "the lock changed hands meanwhile"},
	{SHMLOCK_ERESOURCE_LOCKED, "RESOURCE_LOCKED", "resource is locked"},
	{SHMLOCK_EACQUISITION_FAILED, "LOCK_ACQUISITION_FAILED", "lock acquisition failed: retries exhausted"},
	{SHMLOCK_ELOCK_NOT_HELD, "LOCK_NOT_HELD", "lock is not held by this owner"},
	{SHMLOCK_ELOCK_TIMEOUT, "LOCK_TIMEOUT", "lock expired before release"},
	{SHMLOCK_EWAIT_TIMEOUT, "WAIT_TIMEOUT", "timed out waiting for the lock"},
	{SHMLOCK_ERESOURCE_NOT_FOUND, "RESOURCE_NOT_FOUND", "resource is not declared"},
	{SHMLOCK_EALREADY_HELD, "LOCK_ALREADY_HELD", "owner already holds the lock"},
	{SHMLOCK_EVERSION_CONFLICT, "VERSION_CONFLICT", "version is no longer current"},
	{SHMLOCK_ELOCK_TABLE_FULL, "TABLE_FULL", "lock table is full"},
	{SHMLOCK_ETOO_MANY_HOLDERS, "TOO_MANY_HOLDERS", "too many holders of one resource"},
	{SHMLOCK_EINVALID_RESOURCE, "INVALID_RESOURCE", "invalid resource name"},
	{SHMLOCK_EINVALID_OWNER, "INVALID_OWNER", "invalid owner name"},
	{SHMLOCK_EINVALID_MODE, "INVALID_MODE", "invalid lock mode"},
	{SHMLOCK_EINVALID_OPTIONS, "INVALID_OPTIONS", "invalid options"},
};

static const struct code *find(int rc)
{
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
		if (codes[i].rc == rc)
			return &codes[i];
	return NULL;
}

SHM_EXPORT const char *shmlock_strerror(int rc)
{
	const struct code *c = find(rc);
	return c ? c->text : "unknown shmlock return code";
}

SHM_EXPORT const char *shmlock_error_code(int rc)
{
	const struct code *c = find(rc);
	return c ? c->code : NULL;
}
