// Code in a table cell may break after ".", "(", ",", "=" and "/" (at <wbr>, which copying
// leaves out), so that a table of long calls fits the content column without cutting names
// (never after "_": `get_transform_state` stays whole); the API tables are left as they are.
document.addEventListener("DOMContentLoaded", () => {
  const cells = "article table:not(.autosummary) td code span.pre";
  for (const pre of document.querySelectorAll(cells)) {
    const parts = pre.textContent.split(/(?<=[.(,=/])/);
    if (parts.length > 1) {
      const wbr = () => document.createElement("wbr");
      pre.replaceChildren(...parts.flatMap((part, i) => (i ? [wbr(), part] : [part])));
    }
  }
});
