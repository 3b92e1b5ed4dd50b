// SPDX-License-Identifier: GPL-2.0-only
// The corpus of frame shapes: every shape a test or the fuzzer sends, as a
// function from a source address to the frames of one "send" (one frame, or
// the fragments of one datagram).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "packet.h"

namespace sluice::test {

using Frames = std::vector<std::vector<uint8_t>>;

struct Shape {
	std::string name;  ///< an identifier: letters, digits, '_'
	bool v6 = false;
	/// The frames of one send from `src` to `dst` ("" = the builder's default).
	std::function<Frames(const std::string &src, const std::string &dst)> frames;
	int repeat = 5;    ///< sends per role: past the limited roles' burst of 3
	bool e2e = false;  ///< also sent over veth by the end-to-end test
};

/// Every shape of the corpus (more than 200), in a fixed order.
const std::vector<Shape> &corpus_shapes();

} // namespace sluice::test
