// Models in and out as users move them: NumPy writes an .npz, `fedrt model
// import` makes a checkpoint of it, `fedrt model export` writes it back and
// NumPy reads the same arrays; `fedrt train --save-model` writes an .npz
// numpy.load reads and `--init-model` starts from it. Runs where the build
// found Debian's python3-numpy (.ci/install-deps installs it).
#include <doctest/doctest.h>

#include <string>

#include "run_cli.h"
#include "temp_dir.h"

namespace fedrt {
namespace {

using testing::CliRun;
using testing::RunCli;
using testing::RunCommand;

std::string Python(const std::string& dir, const std::string& code) { return testing::RunPython(dir, code); }

const char kWriteModel[] =
    "rng = np.random.default_rng(1)\n"
    "a = {'dense1.weight': rng.standard_normal((16, 784)), 'dense1.bias': rng.standard_normal(16),\n"
    "     'dense2.weight': rng.standard_normal((10, 16)), 'dense2.bias': rng.standard_normal(10)}\n"
    "np.savez_compressed('in.npz', **{k: v.astype(np.float32) for k, v in a.items()})\n";

TEST_CASE("an .npz from NumPy goes through a checkpoint and back unchanged") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  Python(dir.path(), kWriteModel);
  const std::string in = dir.File("in.npz"), ckpt = dir.File("m.ckpt"), out = dir.File("out.npz");

  const CliRun no_spec = RunCli("model import " + in + " " + ckpt);
  CHECK(no_spec.exit_code == 1);
  CHECK(no_spec.output.find("does not name its model: give it with --model SPEC") != std::string::npos);

  const CliRun wrong = RunCli("model import " + in + " " + ckpt + " --model mlp:784-32-10");
  CHECK(wrong.exit_code == 1);
  CHECK(wrong.output.find("'dense1.weight' has shape (16, 784), model 'mlp:784-32-10' needs (32, 784)") !=
        std::string::npos);

  const CliRun imported = RunCli("model import " + in + " " + ckpt + " --model mlp:784-16-10");
  INFO(imported.output);
  REQUIRE(imported.exit_code == 0);
  const CliRun info = RunCli("model info " + ckpt);
  CHECK(info.output.find("model mlp:784-16-10: 12730 parameters") != std::string::npos);
  CHECK(info.output.find("dense1.weight    16x784") != std::string::npos);

  REQUIRE(RunCli("model export " + ckpt + " " + out).exit_code == 0);
  const std::string same = Python(dir.path(),
                                  "a = np.load('in.npz'); b = np.load('out.npz')\n"
                                  "print(all(np.array_equal(a[k], b[k]) and b[k].dtype == np.float32 for k in a.files),"
                                  " sorted(b.files) == sorted(a.files + ['fedrt_model_spec']),"
                                  " b['fedrt_model_spec'].item().decode())\n");
  CHECK(same == "True True mlp:784-16-10\n");
}

TEST_CASE("vectors are recognised by their bytes, and float64 gets a hint") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  Python(dir.path(),
         "np.save('v.npy', np.arange(1000, dtype=np.float32))\n"
         "import os; os.rename('v.npy', 'v.bin')\n"
         "np.save('d.npy', np.zeros(5))\n");
  const CliRun stats = RunCli("codec stats --codec fp32 " + dir.File("v.bin"));
  CHECK(stats.output.find("coordinates:        1000\n") != std::string::npos);
  const CliRun f64 = RunCli("codec stats --codec fp32 " + dir.File("d.npy"));
  CHECK(f64.exit_code != 0);
  CHECK(f64.output.find("float64; fedrt takes float32: convert it with numpy") != std::string::npos);
}

#ifdef FEDRT_TINY_IDX_DIR
TEST_CASE("fedrt train saves its final model for NumPy and starts from one") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string saved = dir.File("m.npz");
  const CliRun first = RunCli(std::string("train --data ") + FEDRT_TINY_IDX_DIR +
                              " --model mlp:784-32-10 --epochs 1 --batch 16 --save-model " + saved);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK(first.output.find("saved the model to " + saved) != std::string::npos);
  CHECK(Python(dir.path(), "m = np.load('m.npz'); print(m['dense1.weight'].shape, m['dense2.bias'].dtype)\n") ==
        "(32, 784) float32\n");

  const CliRun second = RunCli(std::string("train --data ") + FEDRT_TINY_IDX_DIR +
                               " --epochs 1 --batch 16 --init-model " + saved);
  INFO(second.output);
  CHECK(second.exit_code == 0);
  CHECK(second.output.find("starting from " + saved + " (.npz)") != std::string::npos);
  CHECK(second.output.find("fedrt train: mlp:784-32-10") != std::string::npos);  // the file named the model

  const CliRun other = RunCli(std::string("train --data ") + FEDRT_TINY_IDX_DIR +
                              " --model mlp:784-64-10 --epochs 1 --init-model " + saved);
  CHECK(other.exit_code == 1);
  CHECK(other.output.find("holds model 'mlp:784-32-10', --model says 'mlp:784-64-10'") != std::string::npos);
}
#endif

}  // namespace
}  // namespace fedrt
