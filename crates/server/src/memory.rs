//! How the servers give memory back. glibc's allocator keeps freed memory in per-thread arenas,
//! and once a large buffer has been freed it serves later ones (an OTLP body, a run's trace JSON
//! and the store driver's copies of it: megabytes each) from those arenas too: its dynamic mmap
//! threshold rises to the largest buffer freed. A server's resident memory then keeps the peak
//! of every thread that ever held a large run. A fixed threshold of [`MMAP_THRESHOLD`] maps each
//! such buffer on its own and unmaps it when it is freed (measured by `bench/serve_body_rss.py`,
//! docs/security.md). Other platforms and allocators are left as they are.

/// Allocations of this size or more get their own mapping, returned to the system when freed.
pub const MMAP_THRESHOLD: usize = 1 << 20;

/// Fix the allocator's mmap threshold at [`MMAP_THRESHOLD`] (once per process; glibc on Linux).
pub fn return_large_buffers_to_the_system() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(set_threshold);
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_threshold() {
    let threshold = libc::c_int::try_from(MMAP_THRESHOLD).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt takes two integers and only changes the allocator's parameters; glibc
    // serializes it against allocation.
    let ok = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, threshold) } == 1;
    if !ok {
        tracing::debug!(
            "mallopt(M_MMAP_THRESHOLD) was refused; memory is returned as glibc decides"
        );
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_threshold() {}
