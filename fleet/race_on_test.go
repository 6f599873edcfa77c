//go:build race

package fleet

// raceEnabled is set when the tests run with -race: the simulation then
// runs a smaller fleet, as the detector slows sketch decoding tenfold.
const raceEnabled = true
