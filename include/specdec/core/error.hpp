#pragma once
// The one exception type of specdec: every invalid input (bad option, malformed
// file, mismatched models, non-finite logits) is reported by throwing it, with
// a message that names the bad value and what was expected.
#include <stdexcept>
#include <string>

namespace specdec {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

}  // namespace specdec
