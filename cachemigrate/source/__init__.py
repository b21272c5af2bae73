"""Stage 1, source: bytes in and out. Which files a run takes (walk), decoding with the file's own encoding, BOM
and newlines (decode), the text prefilter that answers most files without parsing (prefilter), skip comments
(suppression), and the atomic write back (writing). Hands the engine text; nothing here parses Python."""
