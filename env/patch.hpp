// Unified diffs over an in-memory set of files: apply one (all or nothing, exact context) and make
// one (for showing workspace changes in replay). No dependency on the rest of env/.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <string_view>

namespace d2k {

using FileMap = std::map<std::string, std::string>;  // path → content

// A diff that cannot be read or does not apply; the message names the file and the hunk.
struct PatchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Applies a unified diff as written by `diff -u` or `git diff`: several files, several hunks each,
// "\ No newline at end of file", creation from /dev/null, deletion to /dev/null, "a/" and "b/"
// prefixes stripped. Every old line (context and '-') must match exactly; a hunk is placed at its
// stated line or, when the lines there differ, at the nearest line where they all match (patch(1)
// with --fuzz=0), ties going to the line above. The work is bounded whatever the diff (it runs on
// the server loop): placing a hunk costs O(its old lines + the distance it moves) line comparisons
// (KMP outward from the stated line), and a diff whose lines, file lines read and comparisons
// together pass a fixed limit (300,000 units, a few ms) is refused with a PatchError that says so.
// Returns the new file set; `files` is never modified. Throws PatchError.
FileMap apply_unified_diff(const FileMap& files, std::string_view diff);

// The unified diff (3 lines of context, "a/" and "b/" prefixes) that turns `before` into `after`;
// empty when they are equal. apply_unified_diff(before, make_unified_diff(before, after)) == after.
std::string make_unified_diff(const FileMap& before, const FileMap& after);

}  // namespace d2k
