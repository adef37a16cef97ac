// Code in a table cell may break after ".", "(", ",", "_", "=" and "/" (at <wbr>, which copying
// leaves out), so that a table of long calls fits the content column without cutting words.
document.addEventListener("DOMContentLoaded", () => {
  for (const pre of document.querySelectorAll("article td code span.pre")) {
    const parts = pre.textContent.split(/(?<=[._(,=/])/);
    if (parts.length > 1) {
      const wbr = () => document.createElement("wbr");
      pre.replaceChildren(...parts.flatMap((part, i) => (i ? [wbr(), part] : [part])));
    }
  }
});
