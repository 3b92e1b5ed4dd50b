// SPDX-License-Identifier: GPL-2.0-only
// The main of the GoogleTest binaries: gtest_main's, with each test given its
// own state directories (own_state_dirs.h).
#include <gtest/gtest.h>

#include "own_state_dirs.h"

int main(int argc, char **argv)
{
	::testing::InitGoogleTest(&argc, argv);
	::testing::UnitTest::GetInstance()->listeners().Append(new sluice::test::OwnStateDirs);
	return RUN_ALL_TESTS();
}
