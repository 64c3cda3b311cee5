// Every kernel of the project starts with GridDependencyPrologue()
// (kernels/cuda/grid_dependency.cuh): the decoder's graphs launch each
// project kernel through a programmatic edge (kernels/cuda/programmatic_graph.h),
// and a kernel without the prologue's wait would read its inputs before the
// kernel that writes them has finished. This reads every .cu / .cuh under
// kernels/cuda (the test's data) and checks each __global__ function's body.

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace {

struct Kernel {
  std::string file;
  int line = 0;
  std::string first_statement;
};

// The __global__ functions with a body in `text` (declarations and comment
// lines skipped), each with the first statement of its body.
std::vector<Kernel> KernelsIn(const std::string& file, const std::string& text) {
  std::vector<Kernel> kernels;
  const std::string key = "__global__";
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    const size_t line_start = text.rfind('\n', at) + 1;  // npos + 1 == 0
    const std::string before = text.substr(line_start, at - line_start);
    if (before.find("//") != std::string::npos) continue;
    // The body's '{' is the first '{' or ';' outside parentheses.
    int depth = 0;
    size_t i = at + key.size();
    for (; i < text.size(); ++i) {
      const char ch = text[i];
      if (ch == '(') ++depth;
      if (ch == ')') --depth;
      if (depth == 0 && (ch == '{' || ch == ';')) break;
    }
    if (i >= text.size() || text[i] != '{') continue;
    size_t s = i + 1;
    while (s < text.size() && std::isspace(static_cast<unsigned char>(text[s]))) ++s;
    const size_t end = text.find(';', s);
    Kernel k{.file = file,
             .line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + at, '\n')),
             .first_statement = text.substr(s, end == std::string::npos ? 0 : end + 1 - s)};
    kernels.push_back(k);
  }
  return kernels;
}

TEST(GridDependencyTest, EveryKernelStartsWithThePrologue) {
  std::vector<Kernel> kernels;
  int files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(
           "kernels/cuda", std::filesystem::directory_options::follow_directory_symlink)) {
    const std::string path = entry.path().string();
    const std::string ext = entry.path().extension().string();
    if (ext != ".cu" && ext != ".cuh") continue;
    if (entry.path().filename() == "grid_dependency.cuh") continue;
    std::ifstream in(entry.path());
    ASSERT_TRUE(in) << path;
    std::stringstream text;
    text << in.rdbuf();
    ++files;
    for (Kernel& k : KernelsIn(path, text.str())) kernels.push_back(k);
  }
  // The tree held 58 kernels in 32 files when this test was written: a much
  // smaller count means the data glob stopped seeing them.
  EXPECT_GE(files, 30);
  EXPECT_GE(kernels.size(), 58u);
  // GridDependencyPrologue(L2Rows) asks L2 for weights first (from the
  // kernel's arguments only), then waits the same way.
  const std::string call = "GridDependencyPrologue(";
  for (const Kernel& k : kernels) {
    const std::string& s = k.first_statement;
    EXPECT_TRUE(s.compare(0, call.size(), call) == 0 && s.size() >= call.size() + 2 &&
                s.compare(s.size() - 2, 2, ");") == 0)
        << k.file << ":" << k.line << ": a kernel must start with GridDependencyPrologue(), "
        << "not " << s;
  }
}

TEST(GridDependencyTest, FindsKernelsAndTheirFirstStatement) {
  const std::string text =
      "// __global__ void Commented() { x(); }\n"
      "__global__ void Decl(int);\n"
      "template <int N>\n"
      "__global__ void __launch_bounds__(N) A(int a, float* b) {\n"
      "  GridDependencyPrologue();\n  b[a] = 0;\n}\n"
      "__global__ void B() {\n  int x = 0;\n}\n";
  const std::vector<Kernel> k = KernelsIn("t", text);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].first_statement, "GridDependencyPrologue();");
  EXPECT_EQ(k[0].line, 4);
  EXPECT_EQ(k[1].first_statement, "int x = 0;");
}

}  // namespace
