//! The JVM reader's JNI library: the `Java_io_rmqlog_spark_*` functions of `rmqlog::jvm` (the
//! `jvm` feature), which a cdylib exports from its dependencies like its own. Loaded into the
//! driver and every executor by `io.rmqlog.spark.Native`.

// Links rmqlog (and so its exports) into this library.
pub use rmqlog;
