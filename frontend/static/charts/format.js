// Numbers as the dashboard writes them, by their column's fmt tag (queries/README.md): the rules
// of the server's headlines (server/headlines.py fmt), held equal to them by the test vectors in
// tests/fixtures/fmt_vectors.json. pct is a 0-1 share, pct100 already 0-100, x a ratio, s/ms/us
// durations, gpu_h GPU-hours, bytes a size, tokens and count plain numbers with thousands
// separators. Rounding is half-to-even on the number's exact value, as Python's format() rounds.
export const SECONDS = {s: 1, ms: 1e-3, us: 1e-6};

// v.toLocaleString("en-US", opts), with each NumberFormat made once: making one is most of its cost.
const formats = new Map();
export function en(v, opts) {
  const key = opts ? JSON.stringify(opts) : "";
  if (!formats.has(key)) formats.set(key, new Intl.NumberFormat("en-US", {roundingMode: "halfEven", ...opts}));
  return formats.get(key).format(v);
}
// v with exactly `digits` decimals and no thousands separators (Python's f"{v:.2f}")
const fixed = (v, digits) => en(v, {minimumFractionDigits: digits, maximumFractionDigits: digits, useGrouping: false});
const significant = (v, digits = 3) => en(v, {maximumSignificantDigits: digits});

// 1,234 for a whole number; 3 significant digits below 1,000; whole with separators above
export const plain = v => Number.isInteger(v) ? en(v) : Math.abs(v) < 1000 ? significant(v) : en(v, {maximumFractionDigits: 0});

// 41%, 3.8%, and one significant digit below 0.1% (0.02%), never a 0.0% that is not 0
export const percent = p =>
  `${Math.abs(p) >= 10 ? fixed(p, 0) : p !== 0 && Math.abs(p) < 0.1 ? significant(p, 1) : fixed(p, 1)}%`;

export function duration(sec) {
  const a = Math.abs(sec);
  if (a >= 3 * 3600) return `${significant(sec / 3600)} h`;
  if (a >= 600) return `${en(sec / 60, {maximumFractionDigits: 0})} min`;
  if (a >= 100) return `${en(sec, {maximumFractionDigits: 0})} s`;
  // below a second in ms, below a ms in µs, by the value as rounded (0.9996 s reads 1.0 s)
  if (a >= 1 || sec === 0 || Math.abs(Number((sec * 1e3).toPrecision(3))) >= 1000) return `${fixed(sec, 1)} s`;
  if (Math.abs(Number((sec * 1e6).toPrecision(3))) >= 1000) return `${significant(sec * 1e3)} ms`;
  return `${significant(sec * 1e6)} µs`;
}

const BYTE_UNITS = ["B", "kB", "MB", "GB", "TB", "PB"];
function bytes(v) {
  let u = 0;
  while (Math.abs(v) >= 1000 && u < BYTE_UNITS.length - 1) { v /= 1000; u += 1; }
  return `${u ? significant(v) : fixed(v, 0)} ${BYTE_UNITS[u]}`;
}

// One formatter per fmt tag; a column without one (a site's own query) reads as a plain number.
const BY_FMT = {
  pct: v => percent(v * 100),
  pct100: percent,
  // the unit by the value as rounded: 9.999 reads 10.0×, not 10.00×
  x: v => `${Math.abs(Number(fixed(v, 2))) < 10 ? fixed(v, 2) : fixed(v, 1)}×`,
  s: v => duration(v),
  ms: v => duration(v * SECONDS.ms),
  us: v => duration(v * SECONDS.us),
  gpu_h: v => `${Math.abs(v) >= 100 ? en(v, {maximumFractionDigits: 0}) : significant(v)} GPU-hours`,
  bytes,
  tokens: plain,
  count: plain,
};

// A value as text by its column's fmt tag: "" for none, a value that is no finite number as it is.
export function fmtNumber(v, kind) {
  if (v === null || v === undefined) return "";
  if (typeof v !== "number" || !Number.isFinite(v)) return String(v);
  return (BY_FMT[kind] || plain)(v);
}
