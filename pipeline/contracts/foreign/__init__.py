"""Other tools' benchmark files (Google Benchmark, NVBench, pytest-benchmark), parsed into our
terms: pure functions of the document, no store. `pipeline.results.store.formats` stores what they parse;
the adb runner reads `iree-benchmark-module`'s Google Benchmark output with the same parser."""
