#include <cstdio>
int main() { std::puts("axle-train: not built yet"); return 2; }
