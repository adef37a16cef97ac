// Code in a table cell may break after ".", "(", ",", "_", "=" and "/" (at <wbr>, which copying
// leaves out), so that a table of long calls fits the content column without cutting words; the
// API tables keep each name whole.
document.addEventListener("DOMContentLoaded", () => {
  const cells = "article table:not(.autosummary) td code span.pre";
  for (const pre of document.querySelectorAll(cells)) {
    const parts = pre.textContent.split(/(?<=[._(,=/])/);
    if (parts.length > 1) {
      const wbr = () => document.createElement("wbr");
      pre.replaceChildren(...parts.flatMap((part, i) => (i ? [wbr(), part] : [part])));
    }
  }
});
