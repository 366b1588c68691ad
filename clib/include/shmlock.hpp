// shmlock.hpp: the C++ face of libshmlock, header-only over shmlock.h.
//
// RAII owners of segments and lock handles, std::chrono timeouts, and lock
// types that meet the standard's requirements, so std::lock_guard,
// std::unique_lock, std::shared_lock and std::scoped_lock work on them:
//
//   auto seg = shmlock::segment::open_or_create("jobs");
//   shmlock::spinlock lock(seg, "queue");             // Lockable, TimedLockable
//   {
//       std::unique_lock<shmlock::spinlock> hold(lock);
//       if (lock.owner_died()) repair();               // told like EOWNERDEAD
//       ...
//   }
//
// Failures throw shmlock::error (a std::system_error whose code() is in
// shmlock::category(), comparable with the SHMLOCK_E* values); try_* forms
// return false when the lock is busy or the time runs out. C++17.
#ifndef SHMLOCK_HPP
#define SHMLOCK_HPP

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "shmlock.h"

namespace shmlock {

// category is the error category of libshmlock's return codes.
inline const std::error_category &category() noexcept
{
	struct cat final : std::error_category {
		const char *name() const noexcept override { return "shmlock"; }
		std::string message(int rc) const override { return shmlock_strerror(rc); }
	};
	static const cat c;
	return c;
}

// error is what the wrappers throw. For SHMLOCK_ESYS, sys_errno() is the
// errno behind it.
class error : public std::system_error {
public:
	error(int rc, const std::string &what)
	    : std::system_error(rc, category(), what), errno_(rc == SHMLOCK_ESYS ? shmlock_errno() : 0)
	{
	}
	int sys_errno() const noexcept { return errno_; }

private:
	int errno_;
};

namespace detail {

inline int check(int rc, const char *what)
{
	if (rc < 0)
		throw error(rc, what);
	return rc;
}

// c_str is s for a C call, which reads it up to its first NUL: a string
// with a NUL inside would name another segment, lock or resource (the part
// before the NUL), which Go refuses to name at all, so it throws rc (the
// code the C call gives a bad name of that kind) instead.
inline const char *c_str(const std::string &s, int rc, const char *what)
{
	if (s.find('\0') != std::string::npos)
		throw error(rc, what);
	return s.c_str();
}

// try_result turns an acquisition's code into true (held), false (busy or
// timed out), or a throw.
inline bool try_result(int rc, const char *what)
{
	if (rc == SHMLOCK_EWOULDBLOCK || rc == SHMLOCK_ETIMEDOUT)
		return false;
	check(rc, what);
	return true;
}

// Durations are converted through long double nanoseconds, which hold any
// duration's count times its period without overflow (and every int64_t
// exactly on x86-64 and arm64): duration_cast to nanoseconds of, say,
// seconds::max() overflows (undefined; in practice a negative count, so a
// wait "for ever" became one try), and so does t - Clock::now() for a time
// point of a coarser duration or near min().
using wide_ns = std::chrono::duration<long double, std::nano>;

// to_ns is a timeout for the C calls: 0 (one try) for a duration of 0 or
// less (or NaN), INT64_MAX (as long as there is) for one past int64_t.
template <class Rep, class Period>
int64_t to_ns(const std::chrono::duration<Rep, Period> &d)
{
	wide_ns ns(d);
	if (!(ns.count() > 0))
		return 0;
	if (ns.count() >= static_cast<long double>(INT64_MAX))
		return INT64_MAX;
	return static_cast<int64_t>(ns.count());
}

template <class Clock, class Duration>
int64_t until_ns(const std::chrono::time_point<Clock, Duration> &t)
{
	return to_ns(wide_ns(t.time_since_epoch()) - wide_ns(Clock::now().time_since_epoch()));
}

// handle owns a C handle and closes it once.
template <class T, int (*Close)(T *)>
class handle {
public:
	handle() = default;
	explicit handle(T *p) noexcept : p_(p) {}
	handle(handle &&o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
	handle &operator=(handle &&o) noexcept
	{
		if (this != &o) {
			reset();
			p_ = std::exchange(o.p_, nullptr);
		}
		return *this;
	}
	handle(const handle &) = delete;
	handle &operator=(const handle &) = delete;
	~handle() { reset(); }
	void reset() noexcept
	{
		if (p_)
			Close(std::exchange(p_, nullptr));
	}
	T *get() const noexcept { return p_; }
	T *release() noexcept { return std::exchange(p_, nullptr); }

private:
	T *p_ = nullptr;
};

} // namespace detail

// segment is an open shmlock segment. A lock made from it may outlive it
// (each keeps the mapping until it is destroyed): its acquisitions then
// throw SHMLOCK_ECLOSED, its releases still release.
class segment {
public:
	static segment open(const std::string &path, const shmlock_options *opts = nullptr)
	{
		shmlock_segment *s = nullptr;
		detail::check(shmlock_open(detail::c_str(path, SHMLOCK_EBADPATH, "shmlock: open"), opts, &s), "shmlock: open");
		return segment(s);
	}
	static segment create(const std::string &path, const shmlock_options *opts = nullptr)
	{
		shmlock_segment *s = nullptr;
		detail::check(shmlock_create(detail::c_str(path, SHMLOCK_EBADPATH, "shmlock: create"), opts, &s),
		              "shmlock: create");
		return segment(s);
	}
	static segment open_or_create(const std::string &path, const shmlock_options *opts = nullptr)
	{
		shmlock_segment *s = nullptr;
		detail::check(shmlock_open_or_create(detail::c_str(path, SHMLOCK_EBADPATH, "shmlock: open"), opts, &s),
		              "shmlock: open");
		return segment(s);
	}
	static void remove(const std::string &path)
	{
		detail::check(shmlock_remove(detail::c_str(path, SHMLOCK_EBADPATH, "shmlock: remove")), "shmlock: remove");
	}

	// data is the named data region (claimed with sizeof(T) bytes on first
	// use, zeroed), as Go's Segment.Data: every process that names it gets
	// the same memory.
	template <class T>
	T *data(const std::string &name)
	{
		void *p = nullptr;
		detail::check(shmlock_data(get(), detail::c_str(name, SHMLOCK_EBADNAME, "shmlock: data region"), sizeof(T), &p),
		              "shmlock: data region");
		return static_cast<T *>(p);
	}

	shmlock_segment *get() const noexcept { return h_.get(); }
	void close() noexcept { h_.reset(); }

private:
	explicit segment(shmlock_segment *s) : h_(s) {}
	detail::handle<shmlock_segment, shmlock_close> h_;
};

// spinlock is a named spinlock of a segment. In pid/tid mode (the default)
// each thread is its own holder (shmlock_holder_thread), recursion counts
// per thread, and a holder's death is told to the next holder:
// owner_died() and inconsistent(), read by the holder while it holds the
// lock. Meets Lockable and TimedLockable.
class spinlock {
public:
	spinlock(segment &seg, const std::string &name, int mode = SHMLOCK_PIDTID) : mode_(mode)
	{
		shmlock_spin *l = nullptr;
		detail::check(shmlock_spin_named(seg.get(), detail::c_str(name, SHMLOCK_EBADNAME, "shmlock: spinlock"), mode, &l),
		              "shmlock: spinlock");
		h_ = detail::handle<shmlock_spin, shmlock_spin_close>(l);
	}

	void lock()
	{
		uint64_t h = acquire_holder();
		note(detail::check(shmlock_spin_lock(h_.get(), h), "shmlock: lock"), h);
	}
	bool try_lock()
	{
		uint64_t h = acquire_holder();
		return attempt(shmlock_spin_trylock(h_.get(), h), h);
	}
	template <class Rep, class Period>
	bool try_lock_for(const std::chrono::duration<Rep, Period> &d)
	{
		uint64_t h = acquire_holder();
		return attempt(shmlock_spin_timedlock(h_.get(), h, detail::to_ns(d)), h);
	}
	template <class Clock, class Duration>
	bool try_lock_until(const std::chrono::time_point<Clock, Duration> &t)
	{
		uint64_t h = acquire_holder();
		return attempt(shmlock_spin_timedlock(h_.get(), h, detail::until_ns(t)), h);
	}
	void unlock() { detail::check(shmlock_spin_unlock(h_.get(), release_holder()), "shmlock: unlock"); }

	// The holder's reports of its acquisition.
	bool owner_died() const noexcept { return report_ == SHMLOCK_OWNERDEAD; }
	bool inconsistent() const noexcept { return shmlock_spin_inconsistent(h_.get()) != 0; }
	void mark_consistent()
	{
		detail::check(shmlock_spin_mark_consistent(h_.get(), release_holder()), "shmlock: mark consistent");
	}
	uint64_t generation() const noexcept { return shmlock_spin_generation(h_.get()); }
	shmlock_spin *native_handle() const noexcept { return h_.get(); }

private:
	// Token mode draws a token per acquisition and keeps it for the
	// release (whoever has the token may release), in the lock object:
	// written by the holder only, once it holds the lock.
	uint64_t acquire_holder() const { return mode_ == SHMLOCK_TOKEN ? shmlock_token_new() : shmlock_holder_thread(); }
	uint64_t release_holder() const noexcept
	{
		return mode_ == SHMLOCK_TOKEN ? token_ : shmlock_holder_thread();
	}
	void note(int rc, uint64_t holder) noexcept
	{
		report_ = rc;
		if (mode_ == SHMLOCK_TOKEN)
			token_ = holder;
	}
	bool attempt(int rc, uint64_t holder)
	{
		if (!detail::try_result(rc, "shmlock: lock"))
			return false;
		note(rc, holder);
		return true;
	}

	int mode_;
	int report_ = 0;
	uint64_t token_ = 0;
	detail::handle<shmlock_spin, shmlock_spin_close> h_;
};

// upgrade_mutex is a handle of a named upgradeable reader/writer mutex:
// unique (lock), shared (lock_shared) and upgrade (lock_upgrade) holds, and
// the conversions between them, with Boost.Interprocess's names. A handle
// is one holder, used by one thread at a time: give each thread its own.
// Meets Lockable, TimedLockable, SharedLockable and SharedTimedLockable.
class upgrade_mutex {
public:
	upgrade_mutex(segment &seg, const std::string &name)
	{
		shmlock_upgrade *m = nullptr;
		detail::check(shmlock_upgrade_named(seg.get(), detail::c_str(name, SHMLOCK_EBADNAME, "shmlock: upgrade mutex"), &m),
		              "shmlock: upgrade mutex");
		h_ = detail::handle<shmlock_upgrade, shmlock_upgrade_close>(m);
	}
	upgrade_mutex(upgrade_mutex &&) = default;
	// A handle moved onto gives back what it holds first, as its
	// destructor does (the default would close it, which a handle that
	// holds refuses: the C handle leaked and its holds kept).
	upgrade_mutex &operator=(upgrade_mutex &&o) noexcept
	{
		if (this != &o) {
			close_releasing(h_.release());
			h_ = std::move(o.h_);
			report_ = o.report_;
		}
		return *this;
	}
	// Destroying a handle that still holds the mutex (an exception passing
	// through a scope that locked it by hand) releases its holds first:
	// kept, they would stall every other process until this one exits.
	~upgrade_mutex() { close_releasing(h_.release()); }

	void lock() { report_ = detail::check(shmlock_upgrade_lock(h_.get()), "shmlock: lock"); }
	bool try_lock() { return held(shmlock_upgrade_trylock(h_.get())); }
	template <class Rep, class Period>
	bool try_lock_for(const std::chrono::duration<Rep, Period> &d)
	{
		return held(shmlock_upgrade_timedlock(h_.get(), detail::to_ns(d)));
	}
	template <class Clock, class Duration>
	bool try_lock_until(const std::chrono::time_point<Clock, Duration> &t)
	{
		return held(shmlock_upgrade_timedlock(h_.get(), detail::until_ns(t)));
	}
	void unlock() { detail::check(shmlock_upgrade_unlock(h_.get()), "shmlock: unlock"); }

	void lock_shared() { detail::check(shmlock_upgrade_lock_shared(h_.get()), "shmlock: lock_shared"); }
	bool try_lock_shared() { return detail::try_result(shmlock_upgrade_trylock_shared(h_.get()), "shmlock: lock_shared"); }
	template <class Rep, class Period>
	bool try_lock_shared_for(const std::chrono::duration<Rep, Period> &d)
	{
		return detail::try_result(shmlock_upgrade_timedlock_shared(h_.get(), detail::to_ns(d)), "shmlock: lock_shared");
	}
	template <class Clock, class Duration>
	bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration> &t)
	{
		return detail::try_result(shmlock_upgrade_timedlock_shared(h_.get(), detail::until_ns(t)),
		                          "shmlock: lock_shared");
	}
	void unlock_shared() { detail::check(shmlock_upgrade_unlock_shared(h_.get()), "shmlock: unlock_shared"); }

	void lock_upgrade() { report_ = detail::check(shmlock_upgrade_lock_upgrade(h_.get()), "shmlock: lock_upgrade"); }
	bool try_lock_upgrade() { return held(shmlock_upgrade_trylock_upgrade(h_.get())); }
	template <class Rep, class Period>
	bool try_lock_upgrade_for(const std::chrono::duration<Rep, Period> &d)
	{
		return held(shmlock_upgrade_timedlock_upgrade(h_.get(), detail::to_ns(d)));
	}
	void unlock_upgrade() { detail::check(shmlock_upgrade_unlock_upgrade(h_.get()), "shmlock: unlock_upgrade"); }

	// Conversions (the handle keeps holding in the old mode if one fails).
	// A unique hold reached from the upgrade lock is left with
	// unlock_and_lock_upgrade or unlock_and_lock_shared, not unlock(), as
	// in Go (upgrade_lock does this for you).
	void unlock_upgrade_and_lock()
	{
		report_ = detail::check(shmlock_upgrade_upgrade_to_unique(h_.get()), "shmlock: upgrade to unique");
	}
	bool try_unlock_upgrade_and_lock() { return held(shmlock_upgrade_try_upgrade_to_unique(h_.get())); }
	template <class Rep, class Period>
	bool try_unlock_upgrade_and_lock_for(const std::chrono::duration<Rep, Period> &d)
	{
		return held(shmlock_upgrade_timed_upgrade_to_unique(h_.get(), detail::to_ns(d)));
	}
	void unlock_and_lock_shared() { detail::check(shmlock_upgrade_unique_to_shared(h_.get()), "shmlock: unique to shared"); }
	void unlock_and_lock_upgrade() { detail::check(shmlock_upgrade_unique_to_upgrade(h_.get()), "shmlock: unique to upgrade"); }

	bool owner_died() const noexcept { return report_ == SHMLOCK_OWNERDEAD; }
	bool inconsistent() const noexcept { return shmlock_upgrade_inconsistent(h_.get()) != 0; }
	void mark_consistent() { detail::check(shmlock_upgrade_mark_consistent(h_.get()), "shmlock: mark consistent"); }
	uint64_t generation() const noexcept { return shmlock_upgrade_generation(h_.get()); }
	shmlock_upgrade *native_handle() const noexcept { return h_.get(); }

private:
	bool held(int rc)
	{
		if (!detail::try_result(rc, "shmlock: lock"))
			return false;
		report_ = rc;
		return true;
	}
	// close_releasing closes m (NULL: nothing), giving back its holds of
	// every mode first if the close is refused for them.
	static void close_releasing(shmlock_upgrade *m) noexcept
	{
		if (m && shmlock_upgrade_close(m) == SHMLOCK_EHELD) {
			shmlock_upgrade_unlock(m);            // a unique hold taken by lock()
			shmlock_upgrade_unique_to_upgrade(m); // an upgraded one goes back first
			shmlock_upgrade_unlock_upgrade(m);
			while (shmlock_upgrade_unlock_shared(m) == SHMLOCK_OK) {
			}
			shmlock_upgrade_close(m);
		}
	}

	int report_ = 0;
	detail::handle<shmlock_upgrade, shmlock_upgrade_close> h_;
};

// upgrade_lock holds an upgrade_mutex's upgrade lock for its lifetime (or,
// after upgrade(), its unique lock), as std::shared_lock does the shared
// lock.
class upgrade_lock {
public:
	explicit upgrade_lock(upgrade_mutex &m) : m_(m) { m_.lock_upgrade(); }
	upgrade_lock(const upgrade_lock &) = delete;
	upgrade_lock &operator=(const upgrade_lock &) = delete;
	~upgrade_lock()
	{
		try {
			if (unique_)
				m_.unlock_and_lock_upgrade(); // an upgraded hold goes back to upgrade, then ends
			m_.unlock_upgrade();
		} catch (...) {
			// A destructor must not throw; the release of a hold this
			// guard took fails only on a corrupted segment.
		}
	}
	// upgrade turns the hold into the unique lock, waiting for the readers.
	void upgrade()
	{
		m_.unlock_upgrade_and_lock();
		unique_ = true;
	}
	bool unique() const noexcept { return unique_; }

private:
	upgrade_mutex &m_;
	bool unique_ = false;
};

// lock_options say how long a hold lasts and how to wait for it.
struct lock_options {
	std::chrono::nanoseconds ttl{0};  // 0: until released (or the process dies)
	int retries = 0;                  // SHMLOCK_RETRY_FOREVER: never give up
	std::chrono::nanoseconds wait{0}; // bound of the whole acquisition; 0 none

	shmlock_acquire_options c() const noexcept
	{
		shmlock_acquire_options o{};
		o.ttl_ns = ttl.count();
		o.retries = retries;
		o.wait_ns = wait.count();
		return o;
	}
};

class lock_manager;

// hold is one granted hold of a lock-manager resource; it is released when
// destroyed (unless released, or moved from, first). It shares the C handle
// with its lock_manager, so it may outlive the manager (returned from a
// function that made one): the handle is closed with the last of them.
class hold {
public:
	hold(hold &&o) noexcept
	    : m_(std::move(o.m_)), resource_(std::move(o.resource_)), owner_(std::move(o.owner_)), info_(o.info_)
	{
	}
	hold &operator=(hold &&) = delete;
	hold(const hold &) = delete;
	hold &operator=(const hold &) = delete;
	~hold()
	{
		if (m_)
			shmlock_lockmgr_release(m_.get(), resource_.c_str(), owner_.c_str());
	}
	void release()
	{
		if (auto m = std::exchange(m_, nullptr))
			detail::check(shmlock_lockmgr_release(m.get(), resource_.c_str(), owner_.c_str()), "shmlock: release");
	}
	void refresh(std::chrono::nanoseconds ttl)
	{
		detail::check(shmlock_lockmgr_refresh(m_.get(), resource_.c_str(), owner_.c_str(), ttl.count(), &info_),
		              "shmlock: refresh");
	}
	void mark_consistent()
	{
		detail::check(shmlock_lockmgr_mark_consistent(m_.get(), resource_.c_str(), owner_.c_str()),
		              "shmlock: mark consistent");
	}
	uint64_t version() const noexcept { return info_.version; } // the fencing token
	bool reclaimed() const noexcept { return info_.reclaimed != 0; }
	bool inconsistent() const noexcept { return info_.inconsistent != 0; }
	const shmlock_lock_info &info() const noexcept { return info_; }

private:
	friend class lock_manager;
	hold(std::shared_ptr<shmlock_lockmgr> m, std::string resource, std::string owner, const shmlock_lock_info &info)
	    : m_(std::move(m)), resource_(std::move(resource)), owner_(std::move(owner)), info_(info)
	{
	}
	std::shared_ptr<shmlock_lockmgr> m_;
	std::string resource_, owner_;
	shmlock_lock_info info_;
};

// lock_manager grants named holds of resources to named owners.
class lock_manager {
public:
	explicit lock_manager(segment &seg)
	{
		shmlock_lockmgr *m = nullptr;
		detail::check(shmlock_lockmgr_open(seg.get(), &m), "shmlock: lock manager");
		h_ = std::shared_ptr<shmlock_lockmgr>(m, shmlock_lockmgr_close);
	}
	// acquire throws shmlock::error on a conflict it does not wait out
	// (code SHMLOCK_ERESOURCE_LOCKED, SHMLOCK_EWAIT_TIMEOUT, ...).
	hold acquire(const std::string &resource, const std::string &owner, int mode = SHMLOCK_EXCLUSIVE,
	             const lock_options &opts = {})
	{
		shmlock_acquire_options o = opts.c();
		shmlock_lock_info info{};
		const char *r = detail::c_str(resource, SHMLOCK_EINVALID_RESOURCE, "shmlock: acquire");
		const char *w = detail::c_str(owner, SHMLOCK_EINVALID_OWNER, "shmlock: acquire");
		detail::check(shmlock_lockmgr_acquire(h_.get(), r, w, mode, &o, &info), "shmlock: acquire");
		return hold(h_, resource, owner, info);
	}
	bool check_version(const std::string &resource, uint64_t version)
	{
		int rc = shmlock_lockmgr_check_version(
		    h_.get(), detail::c_str(resource, SHMLOCK_EINVALID_RESOURCE, "shmlock: check version"), version);
		if (rc == SHMLOCK_EVERSION_CONFLICT)
			return false;
		detail::check(rc, "shmlock: check version");
		return true;
	}
	shmlock_lockmgr *native_handle() const noexcept { return h_.get(); }

private:
	std::shared_ptr<shmlock_lockmgr> h_; // shared with its holds
};

} // namespace shmlock

#endif
