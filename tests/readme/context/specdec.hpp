// Context of documentation snippets that are complete but for their includes:
// the model-agnostic library and the standard headers a snippet may use.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <specdec/specdec.hpp>

using specdec::Token;
