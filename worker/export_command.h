// `flame-worker export`: a checkpoint folder -> the folder HF transformers + fla load
// (worker/checkpoint/exporter.h says what it holds).
//
//   flame-worker export --checkpoint <dump>/checkpoint/step-N --config <config.json>
//                       --output <dir> [--dtype float32|bfloat16|float16]
//                       [--tokenizer <file>] [--reference-logits]
//
// Exit codes: 0 exported; 2 bad input or usage, with a message naming the problem.
#pragma once

namespace flame::worker {

// argv[0] is "export"; returns the process exit code.
int RunExportCommand(int argc, char** argv);

}  // namespace flame::worker
