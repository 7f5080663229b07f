// The page's look as the charts read it: palettes for light and dark, the CSS colours, the font,
// and escaping for the subset of HTML Plotly reads in every text it draws.
const PALETTES = {
  light: ["#2f6fb0", "#e4761b", "#3a9a4a", "#d2424c", "#8463b5", "#1b9e9e", "#b8961a",
          "#d45fa0", "#6f6f6f", "#8c564b"],
  dark: ["#6aa8e8", "#f5a04d", "#6cc56f", "#f07178", "#b594e6", "#4fd1c5", "#e6c84d",
         "#f08ac2", "#b0b0b0", "#c49c94"],
};
export const FONT = "system-ui, -apple-system, Segoe UI, sans-serif";

export const scheme = () => matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
export const palette = () => PALETTES[scheme()];
export const cssVar = name => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
export const severityColor = s => cssVar({critical: "--danger", warn: "--warn"}[s] || "--muted");

// Whatever comes from the data goes in escaped, so a kernel named <a href=...> reads as text.
export const esc = v => String(v ?? "").replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

export function rgba(color, alpha) {
  const hex = color.startsWith("#") ? color : "#888888";
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
}
