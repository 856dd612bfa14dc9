//! The C side (c/rc.h): the table of implementations compiled for this host.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_uint, c_ulong};

#[repr(C)]
pub struct rc_t {
    pub counter: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct rc_impl {
    pub name: *const c_char,
    pub variant: *const c_char,
    pub kind: c_int,
    pub saturated: c_int,
    pub set: unsafe extern "C" fn(*mut rc_t, c_int),
    pub read: unsafe extern "C" fn(*const rc_t) -> c_int,
    pub inc: unsafe extern "C" fn(*mut rc_t),
    pub add: unsafe extern "C" fn(c_int, *mut rc_t),
    pub inc_not_zero: unsafe extern "C" fn(*mut rc_t) -> bool,
    pub dec: unsafe extern "C" fn(*mut rc_t),
    pub dec_and_test: unsafe extern "C" fn(*mut rc_t) -> bool,
    pub sub_and_test: unsafe extern "C" fn(c_int, *mut rc_t) -> bool,
    pub timing: unsafe extern "C" fn(c_uint) -> c_uint,
    pub contended: unsafe extern "C" fn(*mut rc_t, c_uint) -> c_ulong,
}

#[cfg(not(kharden_no_native))]
extern "C" {
    pub fn rc_impls(n: *mut c_uint) -> *const rc_impl;
    pub fn rc_warnings(kind: c_int) -> c_ulong;
    pub fn rc_reset_warnings();
    pub fn rc_selftest(
        impls: *const rc_impl,
        n: c_uint,
        threads: c_int,
        per_thread: c_uint,
    ) -> c_int;
}
