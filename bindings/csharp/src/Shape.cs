// Array-size checks and allocations shared by Model, Dataset and Trainer, refusing what the library
// would refuse with its status and message before these bindings allocate for it.
using System;

namespace Mptrain
{
    internal static class Shape
    {
        internal static long Of(long values, long width, string what)
        {
            // (The library refuses zero rows too; said here in the caller's terms, not as a count.)
            if (values == 0 && width > 0)
                throw new MptException(Status.ShapeMismatch, what + " has no rows: at least one is needed");
            if (width <= 0 || values == 0 || values % width != 0)
                throw new MptException(Status.ShapeMismatch, what + " holds " + values + " values, not whole rows of " + width);
            return values / width;
        }

        /// <summary>The most elements the library accepts in one caller's array (a data set's samples, a
        /// prediction's inputs or outputs): MPT_MAX_HOST_ELEMENTS in mptrain.h. Checked here too, so
        /// that what the library would refuse is refused before these bindings allocate for it.</summary>
        internal const long MaxHostElements = 1L << 40;

        /// <summary>rows * width (both positive) as an element count, refused as the library refuses it:
        /// the same status and message.</summary>
        internal static long Elements(long rows, long width, string what)
        {
            if (width > MaxHostElements / rows)
                throw new MptException(Status.InvalidArgument, what + " would hold more than 2^40 elements");
            return rows * width;
        }

        /// <summary>`count` zeroed floats for C to fill. An array the runtime cannot allocate (too long for
        /// an array, or for memory) is an MptException with OutOfMemory, as it is in C.</summary>
        internal static float[] ZeroedFloats(long count)
        {
            try
            {
                return new float[count];
            }
            catch (OverflowException)
            {
                throw new MptException(Status.OutOfMemory, "out of host memory");
            }
            catch (OutOfMemoryException)
            {
                throw new MptException(Status.OutOfMemory, "out of host memory");
            }
        }

        /// <summary>The output array of a prediction on `rows` rows, after the library's checks of them
        /// (the inputs, then the outputs, within MaxHostElements).</summary>
        internal static float[] PredictionOutput(long rows, long inputFeatures, long outputFeatures)
        {
            Elements(rows, inputFeatures, "the inputs (rows * input features)");
            return ZeroedFloats(Elements(rows, Math.Max(outputFeatures, 1), "the outputs (rows * output features)"));
        }
    }
}
