//! The few JNI calls the bridge makes: arrays in and out, and exceptions thrown.

use std::ffi::CString;

use jni_sys::{jbyteArray, jlongArray, jsize, JNIEnv, JNINativeInterface__1_1};

/// The Java exception every failed call throws.
const EXCEPTION: &std::ffi::CStr = c"io/rmqlog/spark/NativeException";

/// The `JNIEnv` of one native call.
pub(super) struct Env(*mut JNIEnv);

impl Env {
    /// # Safety
    /// `raw` is the `JNIEnv` the JVM passed to the running native method, used on its thread.
    pub(super) unsafe fn new(raw: *mut JNIEnv) -> Env {
        Env(raw)
    }

    fn f(&self) -> &JNINativeInterface__1_1 {
        // SAFETY: a JNIEnv points at the VM's function table, every JNI 1.1 entry filled.
        unsafe { &(**self.0).v1_1 }
    }

    /// The bytes of a Java `byte[]` (null: none).
    pub(super) fn bytes(&self, array: jbyteArray) -> Vec<u8> {
        if array.is_null() {
            return Vec::new();
        }
        // SAFETY: `array` is a live local reference to a byte[] passed to this call; the region
        // copied is its whole length, into a buffer of that length.
        unsafe {
            let len = (self.f().GetArrayLength)(self.0, array);
            let mut out = vec![0u8; usize::try_from(len).unwrap_or(0)];
            (self.f().GetByteArrayRegion)(self.0, array, 0, len, out.as_mut_ptr().cast());
            out
        }
    }

    /// The values of a Java `long[]` (null: none).
    pub(super) fn longs_in(&self, array: jlongArray) -> Vec<i64> {
        if array.is_null() {
            return Vec::new();
        }
        // SAFETY: as in `bytes`, for a long[].
        unsafe {
            let len = (self.f().GetArrayLength)(self.0, array);
            let mut out = vec![0i64; usize::try_from(len).unwrap_or(0)];
            (self.f().GetLongArrayRegion)(self.0, array, 0, len, out.as_mut_ptr());
            out
        }
    }

    /// A new Java `long[]` holding `values` (null, with OutOfMemoryError pending, when the JVM
    /// cannot allocate it).
    pub(super) fn longs(&self, values: &[i64]) -> jlongArray {
        let Ok(len) = jsize::try_from(values.len()) else {
            self.throw("Internal", "a result longer than a Java array");
            return std::ptr::null_mut();
        };
        // SAFETY: a new array of `len` longs, filled from a slice of that length.
        unsafe {
            let array = (self.f().NewLongArray)(self.0, len);
            if !array.is_null() {
                (self.f().SetLongArrayRegion)(self.0, array, 0, len, values.as_ptr());
            }
            array
        }
    }

    /// Throws `NativeException("<kind>\u{1f}<message>")`; the native method then returns.
    /// An exception already pending (the JVM's OutOfMemoryError from an allocation) is kept:
    /// JNI allows no other call but a few while one is.
    pub(super) fn throw(&self, kind: &str, message: &str) {
        let text = format!("{kind}\u{1f}{message}").replace('\0', " ");
        let text = CString::new(text).unwrap_or_default();
        // SAFETY: ExceptionOccurred and DeleteLocalRef may be called with an exception pending;
        // FindClass and ThrowNew only without one, with NUL-terminated strings; a class that
        // cannot be found leaves its NoClassDefFoundError pending instead.
        unsafe {
            let pending = (self.f().ExceptionOccurred)(self.0);
            if !pending.is_null() {
                (self.f().DeleteLocalRef)(self.0, pending);
                return;
            }
            let class = (self.f().FindClass)(self.0, EXCEPTION.as_ptr());
            if !class.is_null() {
                (self.f().ThrowNew)(self.0, class, text.as_ptr());
            }
        }
    }
}
