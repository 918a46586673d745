// libqueue.h from C++: compiles as C++11 and, linked against libqueue.so,
// resolves lq_version_string and lq_version_number by their C names (the
// header's extern "C"; C++ names would be mangled and not resolve).
#include <libqueue.h>

#include <cstdio>

int main() {
    std::puts(lq_version_string());
    return lq_version_number() == LQ_VERSION_NUMBER ? 0 : 1;
}
