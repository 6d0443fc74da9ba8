// Package streams holds the baseline policies built on CUDA streams alone:
// dedicated (HP alone), timeslice (HP and BE in separate GPU contexts),
// streams (one context, equal priorities) and priority (HP at the greatest
// stream priority, BE at the least).
//
// These policies never preempt, pad or hold back work: they launch as fast
// as the streams accept, the way an asynchronous framework does, so they
// show what the platform alone does. They must never touch a gpu.Device;
// they only make decisions through sched.State.
package streams
