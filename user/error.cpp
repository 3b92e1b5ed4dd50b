#include "error.h"

#include <cstring>

namespace sluice {

void throw_errno(const std::string &what, int err)
{
	if (err < 0)
		err = -err;
	throw Error(what + ": " + std::strerror(err));
}

} // namespace sluice
