//! This process's (this thread's) capability sets, through `capget`/`capset` version 3.

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct Header {
    version: u32,
    pid: i32,
}

/// `struct __user_cap_data_struct`: version 3 uses two of them (capabilities 0–31, 32–63).
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const VERSION_3: u32 = 0x2008_0522;

/// Read the calling thread's sets, let `change` edit them, and write them back.
fn update(change: impl FnOnce(&mut [Data; 2])) -> std::io::Result<()> {
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget/capset with a version-3 header and the two data words they use.
    unsafe {
        if libc::syscall(
            libc::SYS_capget,
            &mut header as *mut Header,
            data.as_mut_ptr(),
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        change(&mut data);
        if libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Empty the effective, permitted and inheritable sets.
pub(crate) fn drop_all() -> std::io::Result<()> {
    update(|data| *data = [Data::default(); 2])
}

/// Make every permitted capability effective (leaving fsuid 0 clears the file-system
/// capabilities from the effective set; the permitted set still has them).
pub(crate) fn raise_effective() -> std::io::Result<()> {
    update(|data| {
        for d in data {
            d.effective = d.permitted;
        }
    })
}
