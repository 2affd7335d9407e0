// The one unit of baton_test_pch, the target that builds the test code's precompiled header (CMakeLists.txt,
// baton_test_code): CMake needs a source to hang it on.
