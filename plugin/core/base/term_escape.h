// Text from untrusted sources (file names, commands, labels, pod names, agent
// messages) made safe to print on a terminal, one line per value.
#pragma once

#include <string>
#include <string_view>

namespace shmkeeper {

// `text` with everything a terminal would interpret shown escaped, like
// `ls -b` or git's path quoting:
//   - C0 controls and DEL: \a \b \t \n \v \f \r, the others as \xNN (ESC: \x1b);
//   - bytes that are not valid UTF-8: \xNN, one per byte;
//   - C1 controls (U+0080..U+009F, e.g. the 8-bit CSI U+009B), bidirectional
//     overrides and isolates (U+061C, U+200E/F, U+202A..E, U+2066..9) and the
//     line and paragraph separators (U+2028/9): \uNNNN.
// Everything else, including a backslash, is kept as is: the agent already
// sends bytes that are not UTF-8 as the text \xNN, and a table shows them the
// same way. The result is valid UTF-8 with no control characters, so one
// value is one line and cannot move the cursor or change the terminal.
// Thread-safe (a pure function).
std::string TermEscape(std::string_view text);

}  // namespace shmkeeper
