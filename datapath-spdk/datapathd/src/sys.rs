//! The one place datapathd calls the OS directly.

/// Pins the calling thread to one CPU.
pub fn pin_to_core(core: usize) -> std::io::Result<()> {
    if core >= libc::CPU_SETSIZE as usize {
        return Err(std::io::Error::other(format!("core {core} out of range")));
    }
    // SAFETY: cpu_set_t is a plain bitmask for which all-zero is the valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `core` is below CPU_SETSIZE (checked above), so CPU_SET stays in bounds.
    unsafe { libc::CPU_SET(core, &mut set) };
    // SAFETY: pid 0 is the calling thread; the pointer and size describe `set`,
    // which lives across the call.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
