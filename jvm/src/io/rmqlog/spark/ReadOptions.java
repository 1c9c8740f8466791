package io.rmqlog.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The read's options, parsed and checked as the Python source's {@code parse_options} does
 * (python/rmqlog/spark/options.py): the same names, defaults, syntax and messages.
 */
final class ReadOptions implements Serializable {
  private static final long serialVersionUID = 1L;

  static final String TIER_PREFIX = "tier.";
  static final long DEFAULT_BATCH_BYTES = 64L << 20;
  static final int DEFAULT_BATCH_RECORDS = 65536;
  private static final long MAX_BATCH_BYTES = (1L << 31) - 1;
  static final long MIN_PARTITION_BYTES = 4096;
  private static final List<String> STREAM_ONLY =
      List.of("max_bytes_per_trigger", "max_records_per_trigger", "wait_ms");
  private static final List<String> BATCH_ONLY = List.of("end_offset", "end_timestamp", "pushdown");
  private static final List<String> KNOWN =
      List.of(
          "path", "paths", "start_offset", "end_offset", "start_timestamp", "end_timestamp",
          "max_partition_bytes", "batch_bytes", "batch_records", "fail_on_data_loss",
          "pushdown", "max_bytes_per_trigger", "max_records_per_trigger", "wait_ms",
          "tier_url", "tier_cache_dir");
  private static final String SIZE_FORMS =
      "a number of bytes (4096) or a binary size: 64k, 64m, 1g, 1t, 64KiB, 64MiB (1k = 1024)";
  private static final Pattern SIZE =
      Pattern.compile(
          "(\\d+(?:_\\d+)*)\\s*(?:([kmgt])(?:i?b)?|b)?", Pattern.UNICODE_CHARACTER_CLASS);

  final List<String> paths;
  /** A start offset; null: the log's first record. */
  final Long startOffset;
  final boolean startLatest;
  final Long endOffset;
  final Long startTimestamp;
  final Long endTimestamp;
  /** Bytes per partition; 0: one partition per segment. */
  final long maxPartitionBytes;
  final long batchBytes;
  final long batchRecords;
  final boolean failOnDataLoss;
  final boolean pushdown;
  final String tierUrl;
  final TreeMap<String, String> tierOptions;
  final String tierCacheDir;
  /** A stream's limits per micro-batch (null: none), and its wait for records (ms). */
  final Long maxBytesPerTrigger;
  final Long maxRecordsPerTrigger;
  final long waitMs;
  /** The options given, lowercased: what {@link #check} refuses by the kind of read. */
  private final java.util.Set<String> given;

  private ReadOptions(Map<String, String> keys) {
    given = java.util.Set.copyOf(keys.keySet());
    paths = parsePaths(keys);
    String so = keys.get("start_offset");
    boolean latest = false;
    Long start = null;
    if (so != null) {
      String v = so.trim().toLowerCase(Locale.ROOT);
      if (v.equals("latest")) {
        latest = true;
      } else if (!v.equals("earliest")) {
        start = integer("start_offset", so, 0, "an offset >= 0, \"earliest\" or \"latest\"");
      }
    }
    startOffset = start;
    startLatest = latest;
    String eo = keys.get("end_offset");
    endOffset =
        eo == null || eo.trim().equalsIgnoreCase("latest")
            ? null
            : integer("end_offset", eo, 0, "an offset >= 0 or \"latest\"");
    String ms = "milliseconds since the epoch, an integer >= 0";
    startTimestamp = optional(keys, "start_timestamp", ms);
    endTimestamp = optional(keys, "end_timestamp", ms);
    maxPartitionBytes =
        keys.containsKey("max_partition_bytes")
            ? size("max_partition_bytes", keys.get("max_partition_bytes"), MIN_PARTITION_BYTES,
                Long.MAX_VALUE)
            : 128L << 20;
    batchBytes =
        keys.containsKey("batch_bytes")
            ? size("batch_bytes", keys.get("batch_bytes"), 1, MAX_BATCH_BYTES)
            : DEFAULT_BATCH_BYTES;
    batchRecords =
        keys.containsKey("batch_records")
            ? integer("batch_records", keys.get("batch_records"), 1, "an integer >= 1")
            : DEFAULT_BATCH_RECORDS;
    maxBytesPerTrigger =
        keys.containsKey("max_bytes_per_trigger")
            ? size("max_bytes_per_trigger", keys.get("max_bytes_per_trigger"), 1, Long.MAX_VALUE)
            : null;
    maxRecordsPerTrigger = optional(keys, "max_records_per_trigger", "an integer >= 1", 1);
    String wait = keys.get("wait_ms");
    String ms60 = "milliseconds, an integer in [0, 60000]";
    waitMs = wait == null ? 100 : integer("wait_ms", wait, 0, "milliseconds, an integer >= 0");
    if (waitMs > 60_000) {
      throw bad("wait_ms", wait, ms60);
    }
    failOnDataLoss = bool(keys, "fail_on_data_loss", true);
    pushdown = bool(keys, "pushdown", true);
    tierOptions = new TreeMap<>();
    for (Map.Entry<String, String> e : keys.entrySet()) {
      if (e.getKey().startsWith(TIER_PREFIX)) {
        String name = e.getKey().substring(TIER_PREFIX.length()).trim();
        if (name.isEmpty()) {
          throw bad(e.getKey(), e.getValue(), TIER_PREFIX + "<key>, a setting of the object store");
        }
        tierOptions.put(name, e.getValue());
      }
    }
    String url = keys.get("tier_url");
    if (url != null) {
      url = url.trim();
      if (!isUrl(url)) {
        throw bad("tier_url", keys.get("tier_url"), "a URL: s3://bucket/prefix or file:///dir");
      }
      if (isUrl(paths.get(0))) {
        throw new IllegalArgumentException(
            "rmqlog: option tier_url=" + repr(url) + " names the tier of a store's directories,"
                + " but load() was given the URL " + repr(paths.get(0)) + " itself; give the"
                + " directories in load(), or the URL alone");
      }
    }
    tierUrl = url;
    String cache = keys.get("tier_cache_dir");
    if (cache != null && !cache.trim().startsWith("/")) {
      throw bad("tier_cache_dir", cache, "an absolute directory");
    }
    tierCacheDir = cache == null ? null : cache.trim();
    if ((!tierOptions.isEmpty() || tierCacheDir != null) && url == null && !isUrl(paths.get(0))) {
      String first =
          tierOptions.isEmpty() ? "tier_cache_dir" : TIER_PREFIX + tierOptions.firstKey();
      throw new IllegalArgumentException(
          "rmqlog: option " + first + " configures a tier: give its URL too, in load()"
              + " ('s3://bucket/prefix') or in option tier_url with the store's directories (a"
              + " store remembers its tier's URL, not its settings)");
    }
    if (startOffset != null && endOffset != null && startOffset > endOffset) {
      throw new IllegalArgumentException(
          "rmqlog: start_offset=" + startOffset + " is after end_offset=" + endOffset);
    }
    if (startTimestamp != null && endTimestamp != null && startTimestamp > endTimestamp) {
      throw new IllegalArgumentException(
          "rmqlog: start_timestamp=" + startTimestamp + " is after end_timestamp=" + endTimestamp);
    }
  }

  /**
   * Refuses an option of the other kind of read: {@code "batch"} (spark.read) or
   * {@code "stream"} (spark.readStream), known only once Spark plans the read.
   */
  ReadOptions check(String mode) {
    for (String k : mode.equals("batch") ? STREAM_ONLY : BATCH_ONLY) {
      if (given.contains(k) && mode.equals("batch")) {
        throw new IllegalArgumentException(
            "rmqlog: option " + k + " applies to spark.readStream only");
      }
      if (given.contains(k)) {
        String why = k.startsWith("end_") ? "a stream has no end" : "a stream takes no filter";
        throw new IllegalArgumentException(
            "rmqlog: option " + k + " applies to spark.read only, not to spark.readStream ("
                + why + ")");
      }
    }
    return this;
  }

  /** Checks the options' names and values, for either kind of read. */
  static ReadOptions parse(Map<String, String> options) {
    Map<String, String> keys = new TreeMap<>();
    options.forEach((k, v) -> keys.put(k.toLowerCase(Locale.ROOT), v));
    List<String> unknown = new ArrayList<>();
    for (String k : keys.keySet()) {
      if (!KNOWN.contains(k) && !k.startsWith(TIER_PREFIX)) {
        unknown.add(k);
      }
    }
    if (!unknown.isEmpty()) {
      List<String> named = new ArrayList<>();
      for (String k : unknown) {
        String close = closest(k.replace('-', '_'));
        named.add(
            k.equals("tier_options")
                ? k + " (give each setting as its own option " + TIER_PREFIX + "<key>)"
                : close == null ? k : k + " (did you mean " + close + "?)");
      }
      String what = unknown.size() == 1 ? "option " : "options ";
      throw new IllegalArgumentException(
          "rmqlog: unknown " + what + String.join(", ", named) + "; accepted options: "
              + String.join(", ", KNOWN) + ", " + TIER_PREFIX + "<key>");
    }
    return new ReadOptions(keys);
  }

  /** The known option most like {@code name} (Python's difflib ratio, at least 0.75), or null. */
  private static String closest(String name) {
    String best = null;
    double score = 0.75;
    for (String k : KNOWN) {
      double r = 2.0 * matched(name, 0, name.length(), k, 0, k.length())
          / (name.length() + k.length());
      if (r > score || (r == score && (best == null || k.compareTo(best) > 0))) {
        best = k;
        score = r;
      }
    }
    return best;
  }

  /** The characters difflib's SequenceMatcher matches between a[alo:ahi] and b[blo:bhi]. */
  private static int matched(String a, int alo, int ahi, String b, int blo, int bhi) {
    int bi = alo;
    int bj = blo;
    int size = 0;
    for (int i = alo; i < ahi; i++) {
      for (int j = blo; j < bhi; j++) {
        int k = 0;
        while (i + k < ahi && j + k < bhi && a.charAt(i + k) == b.charAt(j + k)) {
          k++;
        }
        if (k > size) {
          bi = i;
          bj = j;
          size = k;
        }
      }
    }
    if (size == 0) {
      return 0;
    }
    return size + matched(a, alo, bi, b, blo, bj) + matched(a, bi + size, ahi, b, bj + size, bhi);
  }

  static boolean isUrl(String path) {
    int i = path.indexOf("://");
    return i > 0 && path.substring(0, i).matches("[A-Za-z][A-Za-z0-9+.-]*");
  }

  private static List<String> parsePaths(Map<String, String> keys) {
    List<String> given = new ArrayList<>();
    for (String k : List.of("path", "paths")) {
      String v = keys.get(k);
      if (v != null && !v.isEmpty()) {
        given.add(v);
      }
    }
    if (given.isEmpty()) {
      throw new IllegalArgumentException(
          "rmqlog: no store given: use .load('/d0/store:/d1/store'),"
              + " .load('s3://bucket/prefix') or .option('paths', '/d0/store:/d1/store')");
    }
    List<List<String>> found = new ArrayList<>();
    for (String raw : given) {
      String text = raw.trim();
      List<String> parts = new ArrayList<>();
      if (text.startsWith("[")) { // DataFrameReader.load(a, b) passes a JSON list of strings
        for (String item : jsonStrings(text, raw)) {
          parts.addAll(split(item.trim()));
        }
      } else {
        parts.addAll(split(text));
      }
      parts.replaceAll(String::trim);
      parts.removeIf(String::isEmpty);
      if (parts.isEmpty()) {
        throw bad("paths", raw, "directories joined by ':', or a tier URL");
      }
      long urls = parts.stream().filter(ReadOptions::isUrl).count();
      if (urls > 0 && urls < parts.size()) {
        throw new IllegalArgumentException("rmqlog: paths " + repr(raw) + " mix " + MIXED);
      }
      found.add(parts);
    }
    if (found.size() == 2 && !found.get(0).equals(found.get(1))) {
      throw new IllegalArgumentException(
          "rmqlog: both a load() path " + repr(given.get(0)) + " and option paths="
              + repr(given.get(1)) + " were given; use one of them");
    }
    return List.copyOf(found.get(0));
  }

  private static final String MIXED =
      "a tier URL and directories together; give the store's directories in load() and its"
          + " tier's URL in option tier_url, or the URL alone to read the remote segments only";

  private static List<String> split(String text) {
    if (isUrl(text)) {
      return List.of(text);
    }
    if (text.contains("://")) {
      throw new IllegalArgumentException("rmqlog: paths " + repr(text) + " mix " + MIXED);
    }
    return Arrays.asList(text.split(":", -1));
  }

  /** The strings of a JSON list of strings (what load() of several paths passes). */
  private static List<String> jsonStrings(String text, String raw) {
    List<String> out = new ArrayList<>();
    Matcher m = Pattern.compile("\"((?:[^\"\\\\]|\\\\.)*)\"").matcher(text);
    while (m.find()) {
      out.add(m.group(1).replace("\\\"", "\"").replace("\\\\", "\\"));
    }
    if (out.isEmpty()) {
      throw bad("paths", raw, "directories joined by ':'");
    }
    return out;
  }

  private static Long optional(Map<String, String> keys, String name, String accepted) {
    return optional(keys, name, accepted, 0);
  }

  private static Long optional(Map<String, String> keys, String name, String accepted, long min) {
    String v = keys.get(name);
    return v == null ? null : integer(name, v, min, accepted);
  }

  private static long integer(String name, String value, long minimum, String accepted) {
    long n;
    try {
      n = Long.parseLong(value.trim().replace("_", ""));
    } catch (NumberFormatException e) {
      throw bad(name, value, accepted);
    }
    if (n < minimum) {
      throw bad(name, value, accepted);
    }
    return n;
  }

  private static long size(String name, String value, long minimum, long maximum) {
    Matcher m = SIZE.matcher(value.trim().toLowerCase(Locale.ROOT));
    String why;
    if (m.matches()) {
      long unit =
          switch (m.group(2) == null ? "" : m.group(2)) {
            case "k" -> 1L << 10;
            case "m" -> 1L << 20;
            case "g" -> 1L << 30;
            case "t" -> 1L << 40;
            default -> 1L;
          };
      try {
        long n = Math.multiplyExact(Long.parseLong(m.group(1).replace("_", "")), unit);
        if (n < minimum) {
          why = n + " bytes is too small: at least " + described(minimum);
        } else if (n > maximum) {
          why = n + " bytes is too large: at most " + described(maximum);
        } else {
          return n;
        }
      } catch (ArithmeticException | NumberFormatException e) {
        why = m.group(1) + (m.group(2) == null ? "" : m.group(2)) + " is too large: at most "
            + described(maximum);
      }
    } else {
      why = "expected " + SIZE_FORMS;
    }
    throw new IllegalArgumentException(
        "rmqlog: option " + name + "=" + repr(value) + " is not valid: " + why);
  }

  /** {@code n} bytes in both forms when they differ: {@code 4096 (4k)}. */
  private static String described(long n) {
    String[] units = {"t", "g", "m", "k"};
    for (int i = 0; i < units.length; i++) {
      long scale = 1L << (10 * (4 - i));
      if (n != 0 && n % scale == 0) {
        return n + " (" + n / scale + units[i] + ")";
      }
    }
    return Long.toString(n);
  }

  private static boolean bool(Map<String, String> keys, String name, boolean dflt) {
    String v = keys.get(name);
    if (v == null) {
      return dflt;
    }
    String t = v.trim().toLowerCase(Locale.ROOT);
    if (List.of("true", "1", "yes").contains(t)) {
      return true;
    }
    if (List.of("false", "0", "no").contains(t)) {
      return false;
    }
    throw bad(name, v, "\"true\" or \"false\"");
  }

  private static IllegalArgumentException bad(String name, String value, String accepted) {
    return new IllegalArgumentException(
        "rmqlog: option " + name + "=" + repr(value) + " is not valid: expected " + accepted);
  }

  private static String repr(String s) {
    return "'" + s + "'";
  }
}
