// The `encoder_worker` binary behind its flags: a batch run that encodes one dataset into a cache, or (--listen) the
// EncoderService. main.cc parses the flags into an EncoderWorkerCommand; RunEncoderWorkerCommand does the rest and
// returns the exit code (its lines and codes are the binary's contract: 2 bad flags, 1 a failure or a failed file).
// --shard i/N encodes one worker's share into its own cache; --merge joins the N shard caches into one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace baton {

struct EncoderWorkerCommand {
  std::string dataset, cache;       // batch mode: the dataset folder and the cache folder to write
  std::string model;                // the FLUX.2 or Wan diffusers pipeline folder
  int threads = 0;                  // compute threads (0 = all cores)
  std::string trigger;              // added to every caption
  std::string resolution = "1024";  // bucket target area = resolution²; "512,768,1024": each image at each
  int64_t max_sequence_length = 512;
  int64_t max_frames = 81, frame_stride = 1;  // Wan clips
  std::string frames;                         // Wan frame buckets "1,33,81" ("" = the largest 4k+1 up to max_frames)
  std::string frame_extraction = "head";      // Wan: head | chunk | slide | uniform (core/video/clip_windows.h)
  int64_t clips_per_video = 0, slide_stride = 1;
  std::string conditioning = "auto";  // Wan image-to-video (WanEncoderOptions::conditioning)
  std::string dtype = "fp32";
  std::string quantize = "none";   // the text encoder's Linear weights: none | int8 | fp8 (core/text/text_weights.h)
  std::string listen;              // serve EncoderService here instead of a batch run
  std::string cache_root;          // service mode: caches only inside it ("" = the working directory)
  std::string metrics;             // HOST:PORT, "" = no metrics
  std::string shard;               // batch mode: "i/N", this worker's share of the dataset ("" = all of it)
  std::vector<std::string> merge;  // the shard caches to join into `cache` (no encoding, no model)
  // Folders outside a dataset that its symlinks may lead into (dataset_fence.h); empty: links must stay inside.
  std::vector<std::string> follow_links_into;
  std::string control;  // --control: FLUX.2 reference images (encoder_worker/references.h)
};

int RunEncoderWorkerCommand(const EncoderWorkerCommand& command);

}  // namespace baton
